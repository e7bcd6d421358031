"""tpuer.Device: exact products on every back end, the same counters on every back end
(the golden one through its cycle model), and clear errors for bad input."""

import numpy as np
import pytest

import tpuer
from tpuer.driver import MAX_EXACT_K

from conftest import require_simulator

SMALL = tpuer.Config(rows=4, cols=4, ub_depth=32, acc_depth=16, weight_tiles=8,
                     program_depth=64)
ODD = tpuer.Config(rows=3, cols=5, ub_depth=20, acc_depth=7, weight_tiles=3,
                   program_depth=64, weight_fifo_tiles=2)


def int8(rng, shape, low=-128, high=128):
    return rng.integers(low, high, shape).astype(np.int8)


def exact(a, b):
    return a.astype(np.int64) @ b.astype(np.int64)


@pytest.mark.parametrize("cfg", [SMALL, ODD, tpuer.Config()], ids=lambda c: c.name)
def test_golden_matmul_is_exact_for_any_shape(cfg):
    rng = np.random.default_rng(11)
    shapes = [(1, 1, 1), (2, 3, 4), (9, 17, 6), (40, 5, 11), (cfg.acc_depth + 3, 2 * cfg.rows + 1,
                                                                cfg.cols + 1)]
    device = tpuer.Device(cfg)
    for m, k, n in shapes:
        a, b = int8(rng, (m, k)), int8(rng, (k, n))
        y = device.matmul(a, b)
        assert y.dtype == np.int32 and y.shape == (m, n)
        assert np.array_equal(y, exact(a, b)), (m, k, n)
        assert device.stats["macs"] == m * k * n


def test_extreme_values_do_not_overflow():
    device = tpuer.Device(SMALL)
    for value_a, value_b in ((-128, -128), (-128, 127), (127, 127)):
        a = np.full((3, 300), value_a, np.int8)
        b = np.full((300, 2), value_b, np.int8)
        assert np.array_equal(device.matmul(a, b), exact(a, b))


@pytest.mark.parametrize("backend", ["pysim", "verilator", "icarus"])
def test_rtl_backends_match_numpy_and_each_other(backend):
    if backend != "pysim":
        require_simulator(backend)
    rng = np.random.default_rng(12)
    cases = [(int8(rng, (6, 9)), int8(rng, (9, 7))), (int8(rng, (20, 4)), int8(rng, (4, 4))),
             (np.full((5, 8), -128, np.int8), np.full((8, 3), -128, np.int8))]
    cases.append((int8(rng, (1, 3)), int8(rng, (3, 2))))          # weight stalls
    cases.append((int8(rng, (40, 13)), int8(rng, (13, 9))))       # M larger than the memories
    for cfg in (SMALL, ODD):
        golden, device = tpuer.Device(cfg), tpuer.Device(cfg, backend=backend)
        for a, b in cases:
            y = device.matmul(a, b)
            assert np.array_equal(y, exact(a, b))
            assert np.array_equal(golden.matmul(a, b), y)
            assert device.stats == golden.stats, (cfg.name, a.shape, b.shape)
            assert device.stats["cycles"] >= device.stats["mxu_busy_cycles"]


def test_golden_cycle_counts_follow_the_work():
    """The cycle model's figures behave as the design says: zero weight stalls once M is at
    least the array's rows, a stall for a single vector, more cycles for more rows."""
    rng = np.random.default_rng(13)
    cfg = tpuer.Config(rows=8, cols=8)
    device = tpuer.Device(cfg)
    device.matmul(int8(rng, (1, 32)), int8(rng, (32, 32)))
    assert device.stats["weight_stall_cycles"] > 0
    device.matmul(int8(rng, (512, 32)), int8(rng, (32, 32)))
    big = dict(device.stats)
    assert big["weight_stall_cycles"] == 0
    assert big["mxu_busy_cycles"] / big["cycles"] > 0.9
    device.matmul(int8(rng, (256, 32)), int8(rng, (32, 32)))
    assert device.stats["cycles"] < big["cycles"]


@pytest.mark.parametrize("a, b, error, message", [
    ([[1]], np.ones((1, 1), np.int8), TypeError,
     "a must be a NumPy array of dtype int8, not list"),
    (np.ones((2, 2), np.float32), np.ones((2, 2), np.int8), TypeError,
     "a must have dtype int8, not float32"),
    (np.ones((2, 2), np.int8), np.ones((2, 2), np.int16), TypeError,
     "b must have dtype int8, not int16"),
    (np.ones(3, np.int8), np.ones((3, 1), np.int8), ValueError, "a must be 2-D"),
    (np.ones((2, 3), np.int8), np.ones((4, 1), np.int8), ValueError,
     "a has 3 columns but b has 4 rows"),
    (np.ones((0, 3), np.int8), np.ones((3, 1), np.int8), ValueError, "a must not be empty"),
    (np.ones((1, MAX_EXACT_K + 1), np.int8), np.ones((MAX_EXACT_K + 1, 1), np.int8), ValueError,
     "could overflow int32"),
])
def test_bad_operands_are_refused(a, b, error, message):
    with pytest.raises(error, match=message):
        tpuer.Device(SMALL).matmul(a, b)


def test_bad_device_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown backend 'fpga'"):
        tpuer.Device(backend="fpga")
    with pytest.raises(TypeError, match="config must be a tpuer.Config"):
        tpuer.Device(config={"rows": 4})
    with pytest.raises(ValueError, match="operand_width must be 8"):
        tpuer.Device(tpuer.Config(operand_width=4, acc_width=16))


def test_bad_api_input_is_a_clear_type_or_value_error():
    """Every entry point names the bad argument, instead of a wrong answer or a traceback
    from deep inside; NumPy's integers are taken wherever Python's are."""
    from tpuer import isa
    device = tpuer.Device(SMALL)
    for word, kind, text in [(1.7, TypeError, "not float 1.7"), (True, TypeError, "not bool"),
                             ("halt", TypeError, "not str"), (-1, ValueError, "64-bit"),
                             (1 << 64, ValueError, "64-bit")]:
        with pytest.raises(kind, match=r"program\[1\]") as error:
            device.run_program([isa.nop(), word])
        assert text in str(error.value)
    with pytest.raises(TypeError, match="program must be a list"):
        device.run_program(None)
    with pytest.raises(ValueError, match="CONFIG value must fit 32 bits"):
        isa.config(isa.ConfigParam.SHIFT, 2**33)
    with pytest.raises(TypeError, match="CONFIG value must be an integer"):
        isa.config(isa.ConfigParam.SHIFT, 1.5)
    with pytest.raises(TypeError, match="field count must be an integer"):
        isa.read_host(0, 2.0)
    with pytest.raises(TypeError, match="model must be a tpuer.QuantizedModel"):
        device.run(None, np.zeros((1, 4), np.int8))
    # NumPy integers are integers
    cfg = tpuer.Config(rows=np.int64(4), cols=np.int32(4), ub_depth=np.uint16(32))
    assert cfg == tpuer.Config(rows=4, cols=4, ub_depth=32) and type(cfg.rows) is int
    result = device.run_program([isa.read_host(np.int64(0), np.int32(1)),
                                 isa.write_host(0, np.uint8(1)), np.uint64(isa.halt().encode())],
                                host_in=np.ones((1, SMALL.ub_lanes), np.int8),
                                max_cycles=np.int64(1000))
    assert result.host_out.tolist() == [[1] * SMALL.ub_lanes]


def test_quantize_refuses_a_float_network_that_overflows():
    layers = [tpuer.Dense(np.full((4, 3), 1e200), np.zeros(3)),
              tpuer.Dense(np.full((3, 2), 1e200), np.zeros(2))]
    with pytest.raises(ValueError, match="layer 1: the float network's outputs overflow"):
        tpuer.quantize(layers, np.ones((5, 4)))
