import pytest

from tpuer import Config, ConfigError


def test_defaults_are_an_8x8_int8_tpu():
    cfg = Config()
    assert (cfg.rows, cfg.cols, cfg.operand_width, cfg.acc_width) == (8, 8, 8, 32)
    assert cfg.weight_fifo_tiles >= 4
    assert cfg.weight_fifo_depth == cfg.weight_fifo_tiles * cfg.rows
    assert (cfg.operand_min, cfg.operand_max, cfg.acc_min, cfg.acc_max) == \
        (-128, 127, -2**31, 2**31 - 1)


def test_non_square_and_derived_sizes():
    cfg = Config(rows=4, cols=8, ub_depth=100, acc_depth=60)
    assert cfg.ub_lanes == 8
    assert cfg.ub_addr_width == 7 and cfg.acc_addr_width == 6
    assert cfg.name == "4x8-i8a32-ub100-acc60-wf4"
    assert Config(rows=4, cols=8).name == "4x8"


@pytest.mark.parametrize("kwargs, message", [
    ({"rows": 0}, "rows must be between 1 and 256, not 0"),
    ({"cols": 300}, "cols must be between 1 and 256, not 300"),
    ({"rows": 2.5}, "rows must be an integer, not 2.5"),
    ({"rows": True}, "rows must be an integer, not True"),
    ({"acc_width": 18}, "acc_width must be at least 2 * operand_width + ceil(log2(rows)) = 19"),
    ({"rows": 256, "acc_width": 23}, "= 24"),
    ({"acc_width": 40}, "acc_width must be between 2 and 32, not 40"),
    ({"ub_depth": 1}, "ub_depth must be between 2 and 65536, not 1"),
    ({"weight_fifo_tiles": 0}, "weight_fifo_tiles must be between 1 and 64, not 0"),
    ({"rows": 1, "weight_fifo_tiles": 1}, "the Weight FIFO must hold at least 2 rows"),
    ({"multiply_latency": 4}, "multiply_latency must be between 1 and 3, not 4"),
    ({"memory_read_latency": 0}, "memory_read_latency must be between 1 and 2, not 0"),
    ({"control_registers": 2}, "control_registers must be between 0 and 1, not 2"),
    ({"control_registers": True}, "control_registers must be an integer, not True"),
])
def test_bad_values_are_refused_with_a_clear_message(kwargs, message):
    with pytest.raises(ConfigError) as error:
        Config(**kwargs)
    assert message in str(error.value)
    if "acc_width must be at least" in message:
        Config(**{**kwargs, "acc_width": int(message.split("= ")[-1])})  # the minimum is fine


def test_config_is_immutable_and_hashable():
    cfg = Config()
    with pytest.raises(Exception):
        cfg.rows = 4
    assert len({Config(), Config(), Config(rows=4)}) == 2


def test_every_option_and_check_comes_from_the_field_table():
    """The command line's options, their help and the checks are made from one table."""
    import argparse
    from dataclasses import fields
    from tpuer.cli import add_board_config_arguments, add_config_arguments
    parameters = Config.parameters()
    assert [p.name for p in parameters] == [f.name for f in fields(Config)]
    full, board = argparse.ArgumentParser(), argparse.ArgumentParser()
    add_config_arguments(full)
    add_board_config_arguments(board)
    full_help, board_help = " ".join(full.format_help().split()), board.format_help()
    for p in parameters:
        assert p.default == getattr(Config(), p.name)
        option = f"--{p.name.replace('_', '-')}"
        assert f"{option} {p.name.upper()}" in full_help
        assert f"{p.allowed} (default {p.default})" in full_help
        assert (option in board_help) == p.build
        for bad in (p.low - 1, p.high + 1):
            with pytest.raises(ConfigError, match=p.name):
                Config(**{p.name: bad})
    # Gaps in a range are refused too.
    steps = next(p for p in parameters if p.name == "activation_steps")
    assert 3 not in steps.choices
    with pytest.raises(ConfigError, match="activation_steps must be one of 0, 1, 2, 4"):
        Config(activation_steps=3)


def test_a_board_build_changes_only_the_fields_it_may():
    from tpuer.fpga.build import BuildOptionError, build_board
    with pytest.raises(BuildOptionError, match="not ub_depth"):
        build_board("icebreaker", ub_depth=3)
