"""The ``tpuer`` command line."""

import argparse
import sys
from pathlib import Path

from .config import Config, ConfigError

__all__ = ["main"]

_CONFIG_OPTIONS = [
    ("rows", "rows of the systolic array (K of a tile)"),
    ("cols", "columns of the systolic array (N of a tile)"),
    ("operand_width", "bits of an activation or weight"),
    ("acc_width", "bits of an accumulator word"),
    ("ub_depth", "rows of the Unified Buffer"),
    ("acc_depth", "rows of the accumulator memory"),
    ("weight_fifo_tiles", "Weight FIFO depth in tiles"),
    ("weight_tiles", "tiles in the weight memory"),
    ("program_depth", "instructions in the instruction memory"),
]


def add_config_arguments(parser):
    defaults = Config()
    group = parser.add_argument_group("configuration")
    for name, text in _CONFIG_OPTIONS:
        group.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int,
                           default=getattr(defaults, name),
                           help=f"{text} (default {getattr(defaults, name)})")


def config_from_args(parser, args):
    try:
        return Config(**{name: getattr(args, name) for name, _ in _CONFIG_OPTIONS})
    except ConfigError as error:
        parser.error(str(error))


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
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
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
    from .demo import run_demo
    if args.waves:
        os.environ["TPUER_WAVES"] = "1"
    return run_demo(config_from_args(parser, args), simulator=args.simulator, m=args.m,
                    tiles=args.tiles, seed=args.seed)


def _cmd_bench(parser, args):
    from .bench import run_gemm_bench, run_speed_bench
    cfg = config_from_args(parser, args)
    if args.what in ("gemm", "all"):
        run_gemm_bench(cfg, backend=args.backend)
        print()
    if args.what in ("speed", "all"):
        run_speed_bench(cfg, simulators=args.simulator, tiles=args.tiles)
    return 0


def build_parser():
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

    demo = commands.add_parser("demo", help="run a random matrix product on the simulated TPU")
    demo.add_argument("--simulator", default="verilator", choices=["verilator", "icarus"])
    demo.add_argument("-m", type=int, default=16, help="rows of the input matrix (default 16)")
    demo.add_argument("--tiles", type=int, default=2,
                      help="weight tiles multiplied back to back (default 2)")
    demo.add_argument("--seed", type=int, default=2026)
    demo.add_argument("--waves", action="store_true",
                      help="write a waveform file (same as TPUER_WAVES=1)")
    add_config_arguments(demo)
    demo.set_defaults(run=_cmd_demo)

    bench = commands.add_parser(
        "bench", help="GEMM cycles and MXU utilisation on the core; simulator speed")
    bench.add_argument("what", nargs="?", default="all", choices=["all", "gemm", "speed"])
    bench.add_argument("--backend", default="verilator",
                       choices=["verilator", "icarus", "pysim"],
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
    return args.run(parser, args)


if __name__ == "__main__":
    sys.exit(main())
