"""The ``tpuer`` command line."""

import argparse
import sys
from pathlib import Path

from .config import Config

__all__ = ["main"]

def add_config_arguments(parser, defaults=None):
    """An option for every :class:`Config` field, its help and range from the field's
    :class:`~tpuer.config.Parameter`, its default from ``defaults``."""
    defaults = defaults or Config()
    group = parser.add_argument_group("configuration")
    for parameter in Config.parameters():
        default = getattr(defaults, parameter.name)
        _add_parameter_option(group, parameter, default=default,
                              help=f"{parameter.summary}; {parameter.allowed} (default {default})")


def add_board_config_arguments(parser):
    """The options of the :class:`Config` fields a board build may change from the
    board's own (``Parameter.build``); an option not given keeps the board's value."""
    group = parser.add_argument_group("configuration (default: the board's)")
    for parameter in Config.parameters():
        if parameter.build:
            _add_parameter_option(group, parameter,
                                  help=f"{parameter.summary}; {parameter.allowed}")


#: The back ends that run programs and models (``serial`` needs a port, so the commands
#: offer these).
SIMULATED_BACKENDS = ["golden", "pysim", "verilator", "icarus"]


def add_backend_argument(parser, default="golden"):
    parser.add_argument("--backend", default=default, choices=SIMULATED_BACKENDS,
                        help=f"what runs it (default {default})")


def add_model_arguments(parser):
    """A TFLite model and the configuration of the TPU it is mapped onto."""
    parser.add_argument("model", help=".tflite file (full-integer int8)")
    add_config_arguments(parser)


def _add_parameter_option(group, parameter, **options):
    group.add_argument(f"--{parameter.name.replace('_', '-')}", dest=parameter.name, type=int,
                       **options)


def config_from_args(parser, args):
    """The :class:`Config` of the options; a bad value raises ``ConfigError``, which
    :func:`main` reports in one line."""
    return Config(**{parameter.name: getattr(args, parameter.name)
                     for parameter in Config.parameters()})


def _cmd_verilog(parser, args):
    from .hw.export import blocks, build_block, to_verilog
    cfg = config_from_args(parser, args)
    if args.block == "all":
        if args.name is not None:
            parser.error("--name names a single block's module; with --block all every "
                         "module is called tpuer_<block>")
        modules = {name: f"tpuer_{name}" for name in blocks()}
    else:
        modules = {args.block: args.name or "top"}
    names = list(modules)
    texts = [to_verilog(build_block(name, cfg), name=module) for name, module in modules.items()]
    text = "\n".join(texts)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        _check_output(args.output)
        Path(args.output).write_text(text)
        print(f"wrote {', '.join(names)} ({cfg.name}) to {args.output}: "
              f"{text.count(chr(10))} lines", file=sys.stderr)
    return 0


def _cmd_lint(parser, args):
    from .hw.export import blocks
    from .sim.lint import LintFailed, lint_block
    cfg = config_from_args(parser, args)
    names = list(blocks()) if args.block == "all" else [args.block]
    failed = 0
    for name in names:
        try:
            lint_block(name, cfg)
            print(f"{name} ({cfg.name}): clean under verilator --lint-only -Wall")
        except LintFailed as error:
            failed += 1
            print(error, file=sys.stderr)
    return 1 if failed else 0


def _cmd_demo(parser, args):
    import os
    from .demo import run_matrix_unit_demo, run_network_demo, run_tflite_demo
    if args.waves:
        os.environ["TPUER_WAVES"] = "1"
    cfg = config_from_args(parser, args)
    if args.network == "tflite":
        return run_tflite_demo(cfg, backend=args.backend, samples=args.samples,
                               clock_mhz=args.clock_mhz)
    if args.network == "matrix-unit":
        return run_matrix_unit_demo(cfg, simulator=args.simulator, m=args.m,
                                    tiles=args.tiles, seed=args.seed)
    return run_network_demo(args.network, cfg, backend=args.backend, samples=args.samples,
                            clock_mhz=args.clock_mhz)


def _cmd_bench(parser, args):
    from .bench import run_gemm_bench, run_speed_bench
    cfg = config_from_args(parser, args)
    if args.what in ("gemm", "all"):
        run_gemm_bench(cfg, backend=args.backend)
        print()
    if args.what in ("speed", "all"):
        run_speed_bench(cfg, simulators=args.simulator, tiles=args.tiles)
    return 0


def _load_program(path):
    from .assembler import AsmError, assemble, read_program
    if Path(path).suffix == ".bin":
        return read_program(path)
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise AsmError(f"{path}: not UTF-8 text (byte {raw[error.start]:#04x} at offset "
                       f"{error.start}); an assembly file is text, a program file ends in "
                       f".bin") from None
    return assemble(text, name=str(path))


def _load_array(path, option):
    """The NumPy array in ``.npy`` file ``path`` (``None`` for none), or a clear error."""
    import numpy as np
    if path is None:
        return None
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, EOFError):
        raise ValueError(f"{option} {path}: not a NumPy .npy file of numbers (as np.save "
                         f"writes)") from None


def _check_output(path):
    """Refuse an output file whose folder does not exist, before any work."""
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        raise FileNotFoundError(f"cannot write {path}: the folder {folder} does not exist")


def _cmd_asm(parser, args):
    from .assembler import write_program
    program = _load_program(args.source)
    output = args.output or str(Path(args.source).with_suffix(".bin"))
    _check_output(output)
    write_program(output, program)
    print(f"{args.source}: {len(program)} instructions -> {output}", file=sys.stderr)
    return 0


def _cmd_disasm(parser, args):
    from .assembler import disassemble, read_program
    program = read_program(args.binary)
    text = disassemble(program, addresses=not args.bare)
    if args.output:
        _check_output(args.output)
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_run(parser, args):
    import numpy as np
    from .device import Device, TPUError
    from .isa import CoreState
    cfg = config_from_args(parser, args)
    program = _load_program(args.program)
    weights = _load_array(args.weights, "--weights")
    host_in = _load_array(args.input, "--input")
    if args.output:
        _check_output(args.output)
    device = Device(cfg, backend=args.backend)
    try:
        result = device.run_program(program, weights=weights, host_in=host_in)
    except TPUError as error:
        print(f"tpuer run: {error}", file=sys.stderr)
        return 1
    print(f"state {result.state.name}" + (
        f": {result.error.name} at instruction {result.error_pc}"
        if result.state is CoreState.ERROR else ""))
    for name, value in device.stats.items():
        print(f"{name:>20} {value:,}")
    print(f"{'rows to the host':>20} {len(result.host_out):,}")
    if args.output:
        np.save(args.output, result.host_out)
        print(f"rows saved to {args.output}")
    elif len(result.host_out):
        with np.printoptions(linewidth=120, threshold=200):
            print(result.host_out)
    return 0 if result.state is CoreState.HALTED else 1


def _cmd_compile(parser, args):
    from .tflite_model import from_tflite
    cfg = config_from_args(parser, args)
    model = from_tflite(args.model)
    print(f"{args.model}: input {model.input.dtype.__name__}{list(model.input.shape)}, "
          f"output {model.output.dtype.__name__}{list(model.output.shape)}")
    for line in model.report(cfg):
        print(line)
    return 0


def _cmd_run_model(parser, args):
    import numpy as np
    from .device import Device, TPUError
    from .tflite_model import from_tflite
    cfg = config_from_args(parser, args)
    model = from_tflite(args.model)
    x = _load_array(args.input, "--input")
    if args.output:
        _check_output(args.output)
    device = Device(cfg, backend=args.backend)
    try:
        y = device.run(model, x)
    except TPUError as error:
        print(f"tpuer run-model: {error}", file=sys.stderr)
        return 1
    for name, value in device.stats.items():
        print(f"{name:>20} {value:,}")
    if args.output:
        np.save(args.output, y)
        print(f"output {y.dtype}{list(y.shape)} saved to {args.output}")
    else:
        with np.printoptions(linewidth=120, threshold=200):
            print(y)
    return 0


def _cmd_profile(parser, args):
    from .profile import run_profile
    cfg = config_from_args(parser, args)
    board = None
    if args.board:
        from .fpga.boards import board as find_board
        board = find_board(args.board)
        cfg = board.config if not args.keep_config else cfg
    window = None
    if args.window:
        try:
            first, end = (int(part) for part in args.window.split(":"))
        except ValueError:
            raise ValueError(f"--window takes FIRST:END cycles, not {args.window!r}") from None
        if not 0 <= first < end:
            raise ValueError(f"--window FIRST:END needs 0 <= FIRST < END, not {args.window}")
        window = (first, end)
    if args.batch < 1:
        raise ValueError(f"--batch must be at least 1, not {args.batch}")
    run_profile(args.target, cfg, out_dir=args.output, input_path=args.input,
                weights_path=args.weights, batch=args.batch, window=window, board=board,
                load_array=_load_array, load_program=_load_program, backend=args.backend)
    return 0


def _cmd_build(parser, args):
    from .fpga.boards import BOARDS
    from .fpga.build import BuildError, BuildOptionError, build_board
    if args.list or not args.board:
        print("| board | FPGA | TPU | clock target | programmer | serial port |")
        print("| --- | --- | --- | ---: | --- | --- |")
        for b in BOARDS.values():
            print(f"| {b.name} | {b.description} | {b.config.rows}x{b.config.cols} | "
                  f"{b.clock_mhz:g} MHz | {b.programmer} | {b.uart_note} |")
        return 0 if args.list else 2
    try:
        build_board(args.board, **{parameter.name: getattr(args, parameter.name)
                                   for parameter in Config.parameters() if parameter.build},
                    seed=args.seed,
                    router=args.router, placer=args.placer,
                    timing_weight=args.timing_weight,
                    clock_mhz=args.clock_mhz,
                    global_reset=args.global_reset, block=args.block,
                    program=args.program)
    except BuildOptionError:
        raise                               # bad input: one line, exit code 2
    except BuildError as error:             # the tools failed, or the design misses
        print(f"tpuer build: {error}", file=sys.stderr)
        return 1
    return 0


def _cmd_flash(parser, args):
    from .fpga.build import BuildError, program_board
    from .fpga.boards import board as find_board
    try:
        b = find_board(args.board)
        directory = args.build_dir or str(Path("build") / "fpga" /
                                          f"{b.name}-{b.config.rows}x{b.config.cols}")
        program_board(args.board, directory)
    except BuildError as error:
        print(f"tpuer flash: {error}", file=sys.stderr)
        return 1
    return 0


def build_parser():
    from .fpga.build import PLACERS, ROUTERS
    from .hw.export import blocks
    parser = argparse.ArgumentParser(
        prog="tpuer", description="tpuer: a small TPU in Amaranth HDL. Commands:",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    block_choices = ["all", *blocks()]

    verilog = commands.add_parser("verilog", help="write synthesizable Verilog of a block")
    verilog.add_argument("--block", default="matrix_unit", choices=block_choices,
                         help="which block (default matrix_unit; 'all' writes every block)")
    verilog.add_argument("--name", default=None, help="Verilog module name (default top)")
    verilog.add_argument("-o", "--output", default="-", help="output file ('-': stdout)")
    add_config_arguments(verilog)
    verilog.set_defaults(run=_cmd_verilog)

    lint = commands.add_parser("lint", help="lint the generated Verilog with verilator -Wall")
    lint.add_argument("--block", default="all", choices=block_choices)
    add_config_arguments(lint)
    lint.set_defaults(run=_cmd_lint)

    demo = commands.add_parser(
        "demo", help="the main job: a quantised digits network on the simulated TPU",
        description="mlp (default) and cnn: train the network on scikit-learn's digits, "
                    "quantise, compile and run the test split on the simulated TPU. "
                    "tflite: a Keras CNN on the digits, converted to an int8 TFLite model, "
                    "run on the simulated TPU and compared with LiteRT. "
                    "matrix-unit: the matrix unit alone, a random product through it.")
    demo.add_argument("network", nargs="?", default="mlp",
                      choices=["mlp", "cnn", "tflite", "matrix-unit"])
    add_backend_argument(demo, "verilator")
    demo.add_argument("--samples", type=int, default=None,
                      help="test samples to run (default: the whole test split)")
    demo.add_argument("--clock-mhz", type=float, default=100.0,
                      help="clock for the inferences per second (default 100, the "
                           "ULX3S-85F target)")
    demo.add_argument("--simulator", default="verilator", choices=["verilator", "icarus"],
                      help="matrix-unit: the simulator")
    demo.add_argument("-m", type=int, default=16,
                      help="matrix-unit: rows of the input matrix (default 16)")
    demo.add_argument("--tiles", type=int, default=2,
                      help="matrix-unit: weight tiles multiplied back to back (default 2)")
    demo.add_argument("--seed", type=int, default=2026)
    demo.add_argument("--waves", action="store_true",
                      help="write a waveform file (same as TPUER_WAVES=1)")
    from .demo import DEMO_CONFIG
    add_config_arguments(demo, DEMO_CONFIG)
    demo.set_defaults(run=_cmd_demo)

    asm = commands.add_parser("asm", help="assemble a program (.s) into instruction words (.bin)")
    asm.add_argument("source", help="assembly file")
    asm.add_argument("-o", "--output", help="program file (default: the source's name, .bin)")
    asm.set_defaults(run=_cmd_asm)

    disasm = commands.add_parser("disasm", help="a program file (.bin) as assembly text")
    disasm.add_argument("binary", help="program file")
    disasm.add_argument("-o", "--output", help="text file (default stdout)")
    disasm.add_argument("--bare", action="store_true",
                        help="leave out the instruction indices")
    disasm.set_defaults(run=_cmd_disasm)

    run = commands.add_parser("run", help="run a program (.s or .bin) and print its status "
                                          "and counters")
    run.add_argument("program", help="assembly (.s) or program (.bin) file")
    add_backend_argument(run)
    run.add_argument("--weights", help=".npy of int8 weight tiles, shape (tiles, rows, cols), "
                                       "loaded at tile 0")
    run.add_argument("--input", help=".npy of int8 rows for READ_HOST, shape (n, ub_lanes)")
    run.add_argument("-o", "--output", help=".npy for the rows WRITE_HOST sends")
    add_config_arguments(run)
    run.set_defaults(run=_cmd_run)

    compile_ = commands.add_parser(
        "compile", help="map a TFLite int8 model onto the TPU: each operator, where it runs, "
                        "its MACs and cycles")
    add_model_arguments(compile_)
    compile_.set_defaults(run=_cmd_compile)

    run_model = commands.add_parser(
        "run-model", help="run a TFLite int8 model on the TPU, bit-exact with LiteRT's "
                          "reference kernels")
    add_model_arguments(run_model)
    run_model.add_argument("--input", required=True,
                           help=".npy of samples in the model's input type, shape "
                                "(batch, *input shape)")
    run_model.add_argument("-o", "--output", help=".npy for the output (default: print it)")
    add_backend_argument(run_model)
    run_model.set_defaults(run=_cmd_run_model)

    profile = commands.add_parser(
        "profile", help="where every cycle goes: a cycle trace (for Perfetto), a timeline, a "
                        "roofline and a table per operator, layer or program",
        description="Runs TARGET with a cycle trace, recorded by the cycle model (on an "
                    "RTL back end checked against the RTL cycle by cycle): a .tflite model (--input x.npy, "
                    "or random input), a program (.s or .bin, with --weights and --input), "
                    "a matrix product MxKxN of random int8 matrices, or a demo network "
                    "(mlp, cnn). Writes trace.json, timeline.png and roofline.png.")
    profile.add_argument("target", help="model.tflite, prog.s, prog.bin, MxKxN, mlp or cnn")
    profile.add_argument("--input", help=".npy input (a model's samples, a program's rows)")
    profile.add_argument("--weights", help="a program's .npy weight tiles")
    add_backend_argument(profile)
    profile.add_argument("--batch", type=int, default=8,
                         help="samples of random input for a model (default 8)")
    profile.add_argument("--window", help="cycles FIRST:END of the timeline (default: 400 "
                                          "cycles from the start of the longest row)")
    profile.add_argument("--board", help="a board: its TPU's configuration and its UART's "
                                          "roof on the roofline")
    profile.add_argument("--keep-config", action="store_true",
                         help="with --board, the configuration of the options, not the "
                              "board's")
    profile.add_argument("-o", "--output", default="build/profile",
                         help="folder of the trace and the pictures (default build/profile)")
    from .demo import DEMO_CONFIG
    add_config_arguments(profile, DEMO_CONFIG)
    profile.set_defaults(run=_cmd_profile)

    build = commands.add_parser(
        "build", help="a bitstream for a board, with the open toolchain from PyPI, and its "
                      "report (resources, Fmax)")
    build.add_argument("--board", help="the board (tpuer build --list shows them)")
    build.add_argument("--list", action="store_true", help="list the boards")
    add_board_config_arguments(build)
    build.add_argument("--global-reset", action=argparse.BooleanOptionalAction,
                       help="ECP5: the reset on a primary clock network rather than the "
                            "general routing (default: the board's)")
    build.add_argument("--block", choices=list(blocks()),
                       help="build this block of the TPU alone, between registers, for its "
                            "resources and Fmax (the bitstream is not to be programmed)")
    build.add_argument("--seed", type=int,
                       help="nextpnr's placement seed (default: the board's)")
    build.add_argument("--router", choices=ROUTERS,
                       help="nextpnr's router (default: the board's)")
    build.add_argument("--placer", choices=PLACERS,
                       help="nextpnr's placer (default: the board's)")
    build.add_argument("--timing-weight", type=int,
                       help="the weight nextpnr's heap placer gives timing (default: the "
                            "board's)")
    build.add_argument("--clock-mhz", type=float,
                       help="the clock target, made by the PLL (default: the board's; a "
                            "larger array may need a lower one)")
    build.add_argument("--program", action="store_true", help="program the board afterwards")
    build.set_defaults(run=_cmd_build)

    flash = commands.add_parser("flash", help="program a board with its built bitstream")
    flash.add_argument("--board", required=True)
    flash.add_argument("--build-dir", help="where the bitstream is (default: where tpuer "
                                           "build puts it)")
    flash.set_defaults(run=_cmd_flash)

    bench = commands.add_parser(
        "bench", help="GEMM cycles and MXU utilisation on the core; simulator speed")
    bench.add_argument("what", nargs="?", default="all", choices=["all", "gemm", "speed"])
    bench.add_argument("--backend", default="verilator",
                       choices=["verilator", "icarus", "pysim", "golden"],
                       help="back end of the GEMM benchmark (default verilator)")
    bench.add_argument("--simulator", action="append", choices=["verilator", "icarus"],
                       help="simulator to measure (repeatable; default both)")
    bench.add_argument("--tiles", type=int, default=300, help="tiles streamed (default 300)")
    add_config_arguments(bench)
    bench.set_defaults(run=_cmd_bench)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.run(parser, args)
    except (ValueError, TypeError, OSError) as error:
        # Bad input: a value, a file that is missing or not what it should be. Every such
        # error is one line, and exit code 2, as argparse gives for a bad option.
        message = " ".join(str(error).split())
        print(f"tpuer {args.command}: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
