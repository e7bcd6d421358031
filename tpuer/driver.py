"""The driver: turns a matrix product into programs for the core (tiling M, K and N onto
the array, the Unified Buffer and the accumulators) and puts the result back together."""

from dataclasses import dataclass, field

import numpy as np

from . import isa
from .hw.matrix_unit import matrix_unit_latency

__all__ = ["Step", "plan_matmul", "assemble_matmul", "MAX_EXACT_K"]

#: The largest K for which an int8 x int8 product summed in int32 can never saturate.
MAX_EXACT_K = (2**31 - 1) // (128 * 128)


@dataclass
class Step:
    """One program run: load ``weights`` (tiles) at tile 0, run ``program`` from 0 feeding
    ``host_in`` rows; ``outputs`` says which result block each returned row belongs to."""
    program: list
    weights: np.ndarray
    host_in: list
    outputs: list = field(default_factory=list)   # (m0, rows, n_tile)


def _tiles_of(b, cfg, k_tiles, n_tile):
    tiles = np.zeros((len(k_tiles), cfg.rows, cfg.cols), dtype=np.int64)
    for index, kt in enumerate(k_tiles):
        block = b[kt * cfg.rows:(kt + 1) * cfg.rows, n_tile * cfg.cols:(n_tile + 1) * cfg.cols]
        tiles[index, :block.shape[0], :block.shape[1]] = block
    return tiles


def plan_matmul(cfg, a, b):
    """Programs that compute ``a @ b`` (integer arrays of shapes (M, K) and (K, N)).

    Each program takes a block of M rows and a group of K tiles and N tiles that fit the
    weight memory: it reads the block's input rows once (one UB row per K tile), multiplies
    them by every tile of the group, summing over K in the accumulators (one region per N
    tile), with READ_WEIGHTS issued ahead so that the weight shift hides behind the
    multiply, and, after the last K group, sends the accumulator rows to the host.
    """
    m, k = a.shape
    n = b.shape[1]
    k_tiles = -(-k // cfg.rows)
    n_tiles = -(-n // cfg.cols)
    k_group = min(k_tiles, cfg.weight_tiles, cfg.ub_depth)
    n_group = max(1, min(n_tiles, cfg.weight_tiles // k_group, cfg.acc_depth))
    double_block = min(m, cfg.acc_depth // (2 * n_group), cfg.ub_depth // (2 * k_group))
    if k_group == k_tiles and double_block >= 1 and m > double_block:
        return _plan_overlapped(cfg, a, b, n_group, double_block)
    block = max(1, min(m, cfg.acc_depth // n_group, cfg.ub_depth // k_group))
    prefetch = cfg.weight_fifo_tiles + 1
    steps = []
    for n0 in range(0, n_tiles, n_group):
        nts = list(range(n0, min(n_tiles, n0 + n_group)))
        for m0 in range(0, m, block):
            rows = min(block, m - m0)
            for k0 in range(0, k_tiles, k_group):
                kts = list(range(k0, min(k_tiles, k0 + k_group)))
                host_in = []
                for kt in kts:
                    chunk = np.zeros((rows, cfg.ub_lanes), dtype=np.int64)
                    part = a[m0:m0 + rows, kt * cfg.rows:(kt + 1) * cfg.rows]
                    chunk[:, :part.shape[1]] = part
                    host_in.extend(chunk)
                order = [(i_n, i_k) for i_n in range(len(nts)) for i_k in range(len(kts))]
                weights = np.concatenate([_tiles_of(b, cfg, kts, nt) for nt in nts])
                ahead = min(len(order), prefetch)
                # The first tiles load while the inputs arrive.
                program = [isa.read_weights(0, ahead), isa.read_host(0, rows * len(kts))]
                for index, (i_n, i_k) in enumerate(order):
                    program.append(isa.matmul(i_k * rows, i_n * rows, rows,
                                              accumulate=i_k > 0 or k0 > 0))
                    if index + ahead < len(order):
                        program.append(isa.read_weights(index + ahead, 1))
                last = k0 + k_group >= k_tiles
                if last:
                    program.append(isa.write_host(0, rows * len(nts), from_acc=True))
                program.append(isa.halt())
                steps.append(Step(program, weights, host_in,
                                  [(m0, rows, nt) for nt in nts] if last else []))
    return steps


def _input_rows(cfg, a, m0, rows, k_tiles):
    host_in = []
    for kt in range(k_tiles):
        chunk = np.zeros((rows, cfg.ub_lanes), dtype=np.int64)
        part = a[m0:m0 + rows, kt * cfg.rows:(kt + 1) * cfg.rows]
        chunk[:, :part.shape[1]] = part
        host_in.extend(chunk)
    return host_in


def _block_sizes(m, block):
    """M split into blocks of ``block`` rows, except a short first and last block: the
    first block's inputs and the last block's results cannot overlap any product, so they
    are kept small."""
    short = max(1, block // 4)
    if m <= 2 * block:
        return [min(block, m - start) for start in range(0, m, block)]
    sizes = [short]
    rest = m - short
    while rest > block + short:
        sizes.append(block)
        rest -= block
    if rest > short:
        sizes.extend([rest - short, short])
    else:
        sizes.append(rest)
    return sizes


def _plan_overlapped(cfg, a, b, n_group, block):
    """Like :func:`plan_matmul`, with every K tile in one group and several M blocks per
    program, double-buffered: while the matrix unit multiplies block ``i`` (UB and
    accumulator halves ``i % 2``), the host DMA engine sends out the results of block
    ``i - 1`` and brings in the inputs of block ``i + 1``."""
    m, k = a.shape
    n = b.shape[1]
    k_tiles, n_tiles = -(-k // cfg.rows), -(-n // cfg.cols)
    prefetch = cfg.weight_fifo_tiles + 1
    # The second accumulator region starts at the memory's second half, which the
    # sequencer tracks on its own: reading one half out never waits for the other.
    ub_region, acc_region = block * k_tiles, cfg.acc_depth // 2
    steps = []
    for n0 in range(0, n_tiles, n_group):
        nts = list(range(n0, min(n_tiles, n0 + n_group)))
        order = [(i_n, i_k) for i_n in range(len(nts)) for i_k in range(k_tiles)]
        weights = np.concatenate([_tiles_of(b, cfg, list(range(k_tiles)), nt) for nt in nts])
        per_block = 2 * len(order) + 3
        blocks_per_program = max(1, (cfg.program_depth - 4) // per_block)
        all_sizes = _block_sizes(m, block)
        all_starts = list(np.cumsum([0] + all_sizes[:-1]))
        for first in range(0, len(all_sizes), blocks_per_program):
            mine = [int(v) for v in all_starts[first:first + blocks_per_program]]
            sizes = all_sizes[first:first + blocks_per_program]
            ahead = min(len(order), prefetch)
            program = [isa.read_weights(0, ahead), isa.read_host(0, sizes[0] * k_tiles)]
            host_in = _input_rows(cfg, a, mine[0], sizes[0], k_tiles)
            outputs = []
            tiles_read = ahead
            for i, (m0, rows) in enumerate(zip(mine, sizes)):
                ub0, acc0 = (i % 2) * ub_region, (i % 2) * acc_region
                # The previous block's results go out once the other accumulator half has
                # drained (after a pipeline's worth of this block's products); the next
                # block's inputs come in as soon as the DMA engine is done with them.
                drain = matrix_unit_latency(cfg) + 4
                out_at = min(len(order) - 1, -(-drain // rows)) if i > 0 else -1
                out_rows = sizes[i - 1] * len(nts) if i > 0 else 0
                in_at = min(len(order) - 1, out_at + 1 + -(-out_rows // rows)) if i > 0 else 0
                for index, (i_n, i_k) in enumerate(order):
                    if index == out_at:
                        program.append(isa.write_host(((i - 1) % 2) * acc_region, out_rows,
                                                      from_acc=True))
                        outputs.extend((mine[i - 1], sizes[i - 1], nt) for nt in nts)
                    if index == in_at and i + 1 < len(mine):
                        program.append(isa.read_host(((i + 1) % 2) * ub_region,
                                                     sizes[i + 1] * k_tiles))
                        host_in.extend(_input_rows(cfg, a, mine[i + 1], sizes[i + 1], k_tiles))
                    program.append(isa.matmul(ub0 + i_k * rows, acc0 + i_n * rows, rows,
                                              accumulate=i_k > 0))
                    # Keep the Weight FIFO ahead: the tiles of the next block repeat.
                    consumed = i * len(order) + index + 1
                    if tiles_read - consumed < ahead and tiles_read < len(mine) * len(order):
                        program.append(isa.read_weights(tiles_read % len(order), 1))
                        tiles_read += 1
            last = len(mine) - 1
            program.append(isa.write_host((last % 2) * acc_region, sizes[last] * len(nts),
                                          from_acc=True))
            outputs.extend((mine[last], sizes[last], nt) for nt in nts)
            program.append(isa.halt())
            steps.append(Step(program, weights, host_in, outputs))
    return steps


def assemble_matmul(cfg, m, n, steps, outputs):
    """Put the rows the programs returned (``outputs[i]`` for ``steps[i]``) into the
    (M, N) int32 result."""
    result = np.zeros((m, -(-n // cfg.cols) * cfg.cols), dtype=np.int64)
    for step, rows_out in zip(steps, outputs):
        position = 0
        for m0, rows, n_tile in step.outputs:
            block = np.array(rows_out[position:position + rows])[:, :cfg.cols]
            result[m0:m0 + rows, n_tile * cfg.cols:(n_tile + 1) * cfg.cols] = block
            position += rows
    return result[:, :n].astype(np.int32)
