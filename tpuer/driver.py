"""The driver: turns a matrix product into programs for the core (tiling M, K and N onto
the array, the Unified Buffer and the accumulators) and puts the result back together.

A plan is lazy: :meth:`MatmulPlan.steps` makes each program and its input rows only when
a back end asks for it, so memory stays bounded for any M, K and N, and
:meth:`MatmulPlan.templates` lists the distinct programs with how often each runs, from
which the cycle model estimates the whole product before anything runs."""

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from . import isa
from .hw.matrix_unit import matrix_unit_latency

__all__ = ["Step", "MatmulPlan", "plan_matmul", "MAX_EXACT_K"]

#: The largest K for which an int8 x int8 product summed in int32 can never saturate.
MAX_EXACT_K = (2**31 - 1) // (128 * 128)


@dataclass
class Step:
    """One program run: load ``weights`` (tiles) at tile 0, run ``program`` from 0 feeding
    ``host_in`` rows; ``outputs`` says which result block each returned row belongs to."""
    program: list
    weights: np.ndarray
    host_in: np.ndarray
    outputs: list = field(default_factory=list)   # (m0, rows, n_tile)
    #: the products' multiply-accumulates that are not padding (for traces)
    useful_macs: int = None


def _tiles_of(b, cfg, k_tiles, n_tile):
    tiles = np.zeros((len(k_tiles), cfg.rows, cfg.cols), dtype=np.int64)
    for index, kt in enumerate(k_tiles):
        block = b[kt * cfg.rows:(kt + 1) * cfg.rows, n_tile * cfg.cols:(n_tile + 1) * cfg.cols]
        tiles[index, :block.shape[0], :block.shape[1]] = block
    return tiles


def _input_rows(cfg, a, m0, rows, k_tiles):
    """The host rows of M rows ``m0...`` for K tiles ``k_tiles``, tile after tile."""
    host_in = np.zeros((len(k_tiles) * rows, cfg.ub_lanes), dtype=np.int64)
    for index, kt in enumerate(k_tiles):
        part = a[m0:m0 + rows, kt * cfg.rows:(kt + 1) * cfg.rows]
        host_in[index * rows:(index + 1) * rows, :part.shape[1]] = part
    return host_in


def _splits(total, size):
    """``range(0, total, size)`` as (start, length) pairs."""
    return [(start, min(size, total - start)) for start in range(0, total, size)]


def _grouped_program(cfg, rows, k_count, n_count, first_k_group, last_k_group):
    """The program of one block of ``rows`` M rows, ``k_count`` K tiles and ``n_count`` N
    tiles (see :class:`MatmulPlan`)."""
    prefetch = isa.tiles_held(cfg)
    order = [(i_n, i_k) for i_n in range(n_count) for i_k in range(k_count)]
    ahead = min(len(order), prefetch)
    # The first tiles load while the inputs arrive.
    program = [isa.read_weights(0, ahead), isa.read_host(0, rows * k_count)]
    for index, (i_n, i_k) in enumerate(order):
        program.append(isa.matmul(i_k * rows, i_n * rows, rows,
                                  accumulate=i_k > 0 or not first_k_group))
        if index + ahead < len(order):
            program.append(isa.read_weights(index + ahead, 1))
    if last_k_group:
        program.append(isa.write_host(0, rows * n_count, from_acc=True))
    program.append(isa.halt())
    return program


def _block_sizes(m, block):
    """M split into blocks of ``block`` rows, except a short first and last block: the
    first block's inputs and the last block's results cannot overlap any product, so they
    are kept small."""
    short = max(1, block // 4)
    if m <= 2 * block:
        return [min(block, m - start) for start in range(0, m, block)]
    sizes = [short]
    rest = m - short
    full = (rest - short - 1) // block        # blocks of ``block`` while rest > block + short
    sizes.extend([block] * max(0, full))
    rest -= block * max(0, full)
    if rest > short:
        sizes.extend([rest - short, short])
    else:
        sizes.append(rest)
    return sizes


def _overlapped_program(cfg, sizes, n_count, k_tiles, block):
    """The program of consecutive M blocks of ``sizes`` rows, double-buffered (see
    :class:`MatmulPlan`), and the order of its result rows: (block index, N tile index)."""
    prefetch = isa.tiles_held(cfg)
    # The second accumulator region starts at the memory's second half, which the
    # sequencer tracks on its own: reading one half out never waits for the other.
    ub_region, acc_region = block * k_tiles, cfg.acc_depth // 2
    order = [(i_n, i_k) for i_n in range(n_count) for i_k in range(k_tiles)]
    ahead = min(len(order), prefetch)
    program = [isa.read_weights(0, ahead), isa.read_host(0, sizes[0] * k_tiles)]
    outputs = []
    tiles_read = ahead
    for i, rows in enumerate(sizes):
        ub0, acc0 = (i % 2) * ub_region, (i % 2) * acc_region
        # The previous block's results go out once the other accumulator half has drained
        # (after a pipeline's worth of this block's products); the next block's inputs
        # come in as soon as the DMA engine is done with them.
        drain = matrix_unit_latency(cfg) + 4
        out_at = min(len(order) - 1, -(-drain // rows)) if i > 0 else -1
        out_rows = sizes[i - 1] * n_count if i > 0 else 0
        in_at = min(len(order) - 1, out_at + 1 + -(-out_rows // rows)) if i > 0 else 0
        for index, (i_n, i_k) in enumerate(order):
            if index == out_at:
                program.append(isa.write_host(((i - 1) % 2) * acc_region, out_rows,
                                              from_acc=True))
                outputs.extend((i - 1, nt) for nt in range(n_count))
            if index == in_at and i + 1 < len(sizes):
                program.append(isa.read_host(((i + 1) % 2) * ub_region,
                                             sizes[i + 1] * k_tiles))
            program.append(isa.matmul(ub0 + i_k * rows, acc0 + i_n * rows, rows,
                                      accumulate=i_k > 0))
            # Keep the Weight FIFO ahead: the tiles of the next block repeat.
            consumed = i * len(order) + index + 1
            if tiles_read - consumed < ahead and tiles_read < len(sizes) * len(order):
                program.append(isa.read_weights(tiles_read % len(order), 1))
                tiles_read += 1
    last = len(sizes) - 1
    program.append(isa.write_host((last % 2) * acc_region, sizes[last] * n_count,
                                  from_acc=True))
    outputs.extend((last, nt) for nt in range(n_count))
    program.append(isa.halt())
    return program, outputs


class MatmulPlan:
    """The programs that compute ``a @ b`` (int8 arrays of shapes (M, K) and (K, N)).

    Each program takes a block of M rows and a group of K tiles and N tiles that fit the
    weight memory: it reads the block's input rows once (one UB row per K tile), multiplies
    them by every tile of the group, summing over K in the accumulators (one region per N
    tile), with READ_WEIGHTS issued ahead so that the weight shift hides behind the
    multiply, and, after the last K group, sends the accumulator rows to the host.

    When every K tile fits one group and M has several blocks, a program takes several M
    blocks, double-buffered: while the matrix unit multiplies block ``i`` (UB and
    accumulator halves ``i % 2``), the host DMA engine sends out the results of block
    ``i - 1`` and brings in the inputs of block ``i + 1``.
    """

    def __init__(self, cfg, a, b):
        self.cfg, self.a, self.b = cfg, a, b
        m, k = a.shape
        n = b.shape[1]
        self.k_tiles = -(-k // cfg.rows)
        self.n_tiles = -(-n // cfg.cols)
        k_group = min(self.k_tiles, cfg.weight_tiles, cfg.ub_depth)
        self.n_group = max(1, min(self.n_tiles, cfg.weight_tiles // k_group, cfg.acc_depth))
        double_block = min(m, cfg.acc_depth // (2 * self.n_group),
                           cfg.ub_depth // (2 * k_group))
        self.overlapped = k_group == self.k_tiles and double_block >= 1 and m > double_block
        self.n_groups = _splits(self.n_tiles, self.n_group)
        if self.overlapped:
            self.block = double_block
            sizes = _block_sizes(m, double_block)
            per_block = 2 * self.n_group * self.k_tiles + 3
            per_program = max(1, (cfg.program_depth - 4) // per_block)
            starts = np.cumsum([0] + sizes[:-1]).tolist()
            # (starts, sizes) of the blocks of each program
            self.m_groups = [(starts[i:i + per_program], sizes[i:i + per_program])
                             for i in range(0, len(sizes), per_program)]
        else:
            self.block = max(1, min(m, cfg.acc_depth // self.n_group, cfg.ub_depth // k_group))
            self.m_groups = _splits(m, self.block)
            self.k_groups = _splits(self.k_tiles, k_group)

    def __len__(self):
        """The number of programs."""
        per_n = len(self.m_groups) * (1 if self.overlapped else len(self.k_groups))
        return len(self.n_groups) * per_n

    def templates(self):
        """The distinct programs, as (how many times it runs, program)."""
        counts = Counter()
        for _n0, n_count in self.n_groups:
            if self.overlapped:
                for _starts, sizes in self.m_groups:
                    counts[("o", tuple(sizes), n_count)] += 1
            else:
                for _m0, rows in self.m_groups:
                    for k0, k_count in self.k_groups:
                        last = k0 + k_count >= self.k_tiles
                        counts[("g", rows, k_count, n_count, k0 == 0, last)] += 1
        return [(count, self._program(key)) for key, count in counts.items()]

    def _program(self, key):
        if key[0] == "o":
            return _overlapped_program(self.cfg, list(key[1]), key[2], self.k_tiles,
                                       self.block)[0]
        return _grouped_program(self.cfg, *key[1:])

    def steps(self):
        """The :class:`Step` s, one by one."""
        cfg, a, b = self.cfg, self.a, self.b
        k_total, n_total = a.shape[1], b.shape[1]
        for n0, n_count in self.n_groups:
            nts = range(n0, n0 + n_count)
            n_used = min(n_total, (n0 + n_count) * cfg.cols) - n0 * cfg.cols
            if self.overlapped:
                weights = np.concatenate([_tiles_of(b, cfg, range(self.k_tiles), nt)
                                          for nt in nts])
                for starts, sizes in self.m_groups:
                    program, order = _overlapped_program(cfg, sizes, n_count, self.k_tiles,
                                                         self.block)
                    host_in = np.concatenate([_input_rows(cfg, a, m0, rows, range(self.k_tiles))
                                              for m0, rows in zip(starts, sizes)])
                    outputs = [(starts[i], sizes[i], n0 + j) for i, j in order]
                    yield Step(program, weights, host_in, outputs,
                               useful_macs=sum(sizes) * k_total * n_used)
                continue
            for m0, rows in self.m_groups:
                for k0, k_count in self.k_groups:
                    kts = range(k0, k0 + k_count)
                    last = k0 + k_count >= self.k_tiles
                    weights = np.concatenate([_tiles_of(b, cfg, kts, nt) for nt in nts])
                    program = _grouped_program(cfg, rows, k_count, n_count, k0 == 0, last)
                    k_used = min(k_total, (k0 + k_count) * cfg.rows) - k0 * cfg.rows
                    yield Step(program, weights, _input_rows(cfg, a, m0, rows, kts),
                               [(m0, rows, nt) for nt in nts] if last else [],
                               useful_macs=rows * k_used * n_used)

    def place(self, result, step, rows_out):
        """Put the rows one program returned into ``result`` (M, N tiles x cols)."""
        cols = self.cfg.cols
        position = 0
        for m0, rows, n_tile in step.outputs:
            block = np.asarray(rows_out[position:position + rows])[:, :cols]
            result[m0:m0 + rows, n_tile * cols:(n_tile + 1) * cols] = block
            position += rows


def plan_matmul(cfg, a, b):
    """The :class:`MatmulPlan` of ``a @ b``."""
    return MatmulPlan(cfg, a, b)
