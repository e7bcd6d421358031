"""The main job: Verilog of the matrix unit, and a random matrix product run through it on
a simulator and checked against NumPy."""

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

__all__ = ["run_demo"]


def _say(text=""):
    print(text, flush=True)


def run_demo(cfg, *, simulator="verilator", m=16, tiles=2, seed=2026):
    from .hw.export import build_block, to_verilog
    from .sim import cocotb_backend as backend

    if not 1 <= m <= 4096:
        raise SystemExit(f"tpuer demo: -m must be between 1 and 4096, not {m}")
    if not 1 <= tiles <= 64:
        raise SystemExit(f"tpuer demo: --tiles must be between 1 and 64, not {tiles}")
    _say(f"tpuer demo: a {cfg.rows}x{cfg.cols} weight-stationary systolic array "
         f"(int{cfg.operand_width} x int{cfg.operand_width} -> int{cfg.acc_width}), "
         f"Weight FIFO {cfg.weight_fifo_tiles} tiles deep")

    out_dir = backend.build_root() / "demo"
    out_dir.mkdir(parents=True, exist_ok=True)
    verilog_path = out_dir / f"matrix_unit-{cfg.name}.v"
    verilog_path.write_text(to_verilog(build_block("matrix_unit", cfg), name="top"))
    _say(f"[1/3] Verilog of the matrix unit: {verilog_path} "
         f"({verilog_path.read_text().count(chr(10))} lines)")

    started = time.perf_counter()
    _say(f"[2/3] building it for {simulator} (the first build takes a while; later runs reuse it)")
    try:
        built = backend.build("matrix_unit", cfg, simulator)
    except backend.SimulatorUnavailable as error:
        raise SystemExit(f"tpuer demo: {error}")
    _say(f"      ready in {time.perf_counter() - started:.1f} s: {built.directory}")

    rng = np.random.default_rng(seed)
    a = rng.integers(cfg.operand_min, cfg.operand_max + 1, (m, cfg.rows))
    weights = rng.integers(cfg.operand_min, cfg.operand_max + 1, (tiles, cfg.rows, cfg.cols))
    _say(f"[3/3] multiplying A ({m}x{cfg.rows}) by {tiles} weight tile(s) W "
         f"({cfg.rows}x{cfg.cols}) back to back on {simulator}")
    with tempfile.TemporaryDirectory() as tmp:
        job_in, job_out = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(job_in, a=a, tiles=weights)
        started = time.perf_counter()
        backend.run(built, test_module="tpuer.tb.jobs", testcase="matmul",
                    extra_env={"TPUER_JOB_IN": str(job_in), "TPUER_JOB_OUT": str(job_out)})
        seconds = time.perf_counter() - started
        result = dict(np.load(job_out))

    got = result["results"].reshape(tiles, m, cfg.cols)
    want = np.einsum("mk,tkn->tmn", a, weights)
    np.set_printoptions(linewidth=120)
    shown = min(m, 4)
    _say(f"\nA[:{shown}] =\n{a[:shown]}\nW0 =\n{weights[0]}\n(A @ W0)[:{shown}] from the TPU =\n"
         f"{got[0][:shown]}")
    match = np.array_equal(got, want)
    vectors = m * tiles
    span = int(result["last_result_cycle"] - result["first_result_cycle"]) + 1
    macs = vectors * cfg.rows * cfg.cols
    _say(f"\ncheck against NumPy (a @ w for every tile): "
         f"{'all ' + str(vectors * cfg.cols) + ' values equal' if match else 'MISMATCH'}")
    _say(f"cycles: {int(result['cycles'])} in all; {vectors} result rows in {span} cycles "
         f"(one per cycle when {span} == {vectors}); "
         f"weight-stall cycles {int(result['weight_stall_cycles'])}")
    _say(f"MXU utilisation while streaming: {100 * macs / (cfg.rows * cfg.cols * span):.1f}% "
         f"({macs} MACs); simulation took {seconds:.1f} s")
    if built.waves:
        _say(f"waveform: {backend.waves_file(built)} (open it with gtkwave or surfer)")
    if not match:
        bad = np.argwhere(got != want)[:5]
        _say(f"first differences at (tile, row, col): {bad.tolist()}")
        return 1
    return 0


if __name__ == "__main__":
    from .config import Config
    sys.exit(run_demo(Config()))
