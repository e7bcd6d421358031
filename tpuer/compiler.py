"""The compiler: a :class:`~tpuer.quantize.QuantizedModel` into programs for the core.

A model is cut into *segments*. A segment is a chain of layers that runs in one program
per block of input rows: the host sends the block's rows of the segment's first layer
(im2col patches for a convolution), every layer of the chain multiplies, requantises
and leaves its output in the Unified Buffer as the next layer's input, and the last
layer's int8 rows go back to the host. Dense layers chain when the array is square
(an output tile of ``cols`` lanes is then exactly an input tile of ``rows`` lanes); a
convolution starts a segment of its own, since its patches are gathered by the host.

Within a program, for each layer and each output tile ``j``: the weight tiles of ``j``
multiply the input tiles one after another, summing in accumulator half ``j % 2``; the
activation of tile ``j`` is issued after the products of tile ``j + 1``, so that it waits
for nothing but its own half's drain while the matrix unit works on the other half.
READ_WEIGHTS is issued a Weight FIFO's depth ahead, so weight shifts hide behind products,
and the input comes in one tile per READ_HOST, each issued before the products of the tile
ahead of it, so that only the first tile's transfer is not hidden.

Memory layout of a block of ``b`` rows (``T`` = the most tiles any layer of the chain
reads or writes): Unified Buffer rows ``[0, b T)`` and ``[b T, 2 b T)`` take turns as
input and output; tile ``i`` of item ``r`` is row ``base + i b + r``. Accumulator rows
``[h A, h A + b)`` for half ``h`` (``A = acc_depth // 2``).
"""

from dataclasses import dataclass, field

import numpy as np

from . import isa
from .isa import ALL_LANES, ConfigParam

__all__ = ["CompileError", "Segment", "Plan", "compile_model"]


class CompileError(ValueError):
    """The model does not fit the configured TPU; the message says what and by how much."""


@dataclass
class Segment:
    """Layers ``layers`` (indices into the model) run as one chain; for a layer too big for
    the weight memory, ``n_tiles`` is the range of its output tiles this segment makes."""
    layers: list
    n_tiles: tuple = None
    block: int = 0                      # input rows per program
    weights: np.ndarray = None          # (tiles, rows, cols), in the order of use
    program_length: int = 0


@dataclass
class Plan:
    """Segments of a model compiled for a configuration."""
    cfg: object
    model: object
    segments: list = field(default_factory=list)


def _tiles(count, size):
    return -(-count // size)


def _layer_tiles(cfg, layer, n_range=None):
    kt = _tiles(layer.k, cfg.rows)
    j0, j1 = n_range if n_range else (0, _tiles(layer.n, cfg.cols))
    return kt, j0, j1


def _weight_tiles(cfg, layer, n_range):
    """The weight tiles of ``layer``'s output tiles ``n_range``, in the order of use."""
    kt, j0, j1 = _layer_tiles(cfg, layer, n_range)
    w = np.zeros((kt * cfg.rows, _tiles(layer.n, cfg.cols) * cfg.cols), np.int64)
    w[:layer.k, :layer.n] = layer.weights
    tiles = [w[i * cfg.rows:(i + 1) * cfg.rows, j * cfg.cols:(j + 1) * cfg.cols]
             for j in range(j0, j1) for i in range(kt)]
    return np.array(tiles, dtype=np.int64).reshape(-1, cfg.rows, cfg.cols)


def _config_lanes(cfg, param, values, state, program):
    """CONFIG instructions that set ``values`` (one per lane; ``None`` = don't care),
    skipping what ``state`` says is already set."""
    wanted = [(lane, int(v)) for lane, v in enumerate(values) if v is not None]
    if wanted and all(v == wanted[0][1] for _, v in wanted) and \
            any(state.get((param, lane)) != v for lane, v in wanted):
        program.append(isa.config(param, wanted[0][1], ALL_LANES))
        for lane in range(cfg.cols):
            state[(param, lane)] = wanted[0][1]
        return
    for lane, value in wanted:
        if state.get((param, lane)) != value:
            program.append(isa.config(param, value, lane))
            state[(param, lane)] = value


def _segment_program(cfg, model, segment, block):
    """The program of one block of ``block`` input rows (the last block may be shorter:
    its program is made with its own size)."""
    layers = [model.layers[index] for index in segment.layers]
    shapes = [_layer_tiles(cfg, layer, segment.n_tiles) for layer in layers]
    tiles_total = sum(kt * (j1 - j0) for kt, j0, j1 in shapes)
    region = block * max(max(kt, j1 - j0) for kt, j0, j1 in shapes)
    half = cfg.acc_depth // 2
    ahead = min(tiles_total, cfg.weight_fifo_tiles + 1)
    # The input arrives one tile at a time, each transfer overlapping the products of the
    # tile before it (the DMA engine moves one transfer while the next waits).
    program = [isa.read_weights(0, ahead), isa.read_host(0, block)]
    inputs_sent = 1
    read = ahead
    state = {}
    source, target = 0, region

    def matmuls(kt, j, count):
        nonlocal read, inputs_sent
        for i in range(kt):
            if inputs_sent < shapes[0][0] and inputs_sent == i + 1:
                program.append(isa.read_host(inputs_sent * block, block))
                inputs_sent += 1
            program.append(isa.matmul(source + i * block, (count % 2) * half, block,
                                      accumulate=i > 0, switch=True))
            if read < tiles_total:
                program.append(isa.read_weights(read, 1))
                read += 1

    for layer, (kt, j0, j1) in zip(layers, shapes):
        program.append(isa.config(ConfigParam.ZERO_POINT, layer.output_zero_point))
        program.append(isa.config(ConfigParam.RELU, int(layer.relu)))

        def activate(j, count):
            lanes = range(j * cfg.cols, (j + 1) * cfg.cols)
            for param, values in ((ConfigParam.BIAS, layer.bias),
                                  (ConfigParam.MULTIPLIER, layer.multiplier),
                                  (ConfigParam.SHIFT, layer.shift)):
                _config_lanes(cfg, param, [values[c] if c < layer.n else None for c in lanes],
                              state, program)
            program.append(isa.activate((count % 2) * half, target + (j - j0) * block, block))

        for count, j in enumerate(range(j0, j1)):
            matmuls(kt, j, count)
            if count > 0:
                activate(j - 1, count - 1)
        activate(j1 - 1, j1 - j0 - 1)
        source, target = target, source
    program.append(isa.write_host(source, block * (shapes[-1][2] - shapes[-1][1])))
    program.append(isa.halt())
    return program


def _fits(cfg, model, segment):
    """Why ``segment`` does not fit (a message), or ``None``; sets its block size."""
    layers = [model.layers[index] for index in segment.layers]
    shapes = [_layer_tiles(cfg, layer, segment.n_tiles) for layer in layers]
    tiles_total = sum(kt * (j1 - j0) for kt, j0, j1 in shapes)
    if tiles_total > cfg.weight_tiles:
        return (f"needs {tiles_total} weight tiles; the weight memory holds "
                f"{cfg.weight_tiles} (Config.weight_tiles)")
    per_row = max(max(kt, j1 - j0) for kt, j0, j1 in shapes)
    block = min(cfg.ub_depth // (2 * per_row), cfg.acc_depth // 2)
    if block < 1:
        return (f"needs {2 * per_row} Unified Buffer rows per input row; the Unified Buffer "
                f"has {cfg.ub_depth} (Config.ub_depth)")
    length = len(_segment_program(cfg, model, segment, 1))
    if length > cfg.program_depth:
        return (f"needs a program of {length} instructions; the instruction memory holds "
                f"{cfg.program_depth} (Config.program_depth)")
    segment.block = block
    segment.program_length = length
    segment.weights = np.concatenate([_weight_tiles(cfg, layer, segment.n_tiles)
                                      for layer in layers])
    return None


def _chains(previous, layer, cfg):
    return (previous is not None and previous.kind == "dense" and layer.kind == "dense"
            and cfg.rows == cfg.cols)


def compile_model(cfg, model, *, chain=True):
    """Segments of ``model`` for configuration ``cfg``; with ``chain`` False every layer
    is a segment of its own. Raises :class:`CompileError` when a layer cannot fit."""
    if cfg.operand_width != 8 or cfg.acc_width != 32:
        raise CompileError(f"the compiler needs int8 operands and int32 accumulators, not "
                           f"{cfg.operand_width} and {cfg.acc_width} bits")
    plan = Plan(cfg, model)
    current = None
    for index, layer in enumerate(model.layers):
        if chain and current is not None and _chains(model.layers[index - 1], layer, cfg):
            longer = Segment(current.layers + [index])
            if _fits(cfg, model, longer) is None:
                plan.segments[-1] = current = longer
                continue
        whole = Segment([index])
        problem = _fits(cfg, model, whole)
        if problem is None:
            plan.segments.append(whole)
            current = whole
            continue
        # Too big for one program: its output tiles in groups, the input sent to each.
        n_tiles = _tiles(layer.n, cfg.cols)
        groups = []
        size = n_tiles
        while size >= 1:
            trial = Segment([index], (0, size))
            if _fits(cfg, model, trial) is None:
                break
            size //= 2
        if size < 1:
            raise CompileError(f"layer {index} ({layer.kind}, {layer.k} x {layer.n}) "
                               f"does not fit: {_fits(cfg, model, Segment([index], (0, 1)))}")
        for j0 in range(0, n_tiles, size):
            part = Segment([index], (j0, min(n_tiles, j0 + size)))
            _fits(cfg, model, part)
            groups.append(part)
        plan.segments.extend(groups)
        current = None
    return plan


def segment_steps(plan, segment, rows):
    """Driver steps (one program per block) of ``segment`` for its input ``rows`` (int8,
    shape (items, K of its first layer))."""
    from .driver import Step
    cfg, model = plan.cfg, plan.model
    first = model.layers[segment.layers[0]]
    kt = _tiles(first.k, cfg.rows)
    padded = np.zeros((len(rows), kt * cfg.rows), np.int64)
    padded[:, :first.k] = rows
    steps = []
    for start in range(0, len(rows), segment.block):
        block = padded[start:start + segment.block]
        host_in = np.zeros((kt * len(block), cfg.ub_lanes), np.int64)
        for i in range(kt):
            host_in[i * len(block):(i + 1) * len(block), :cfg.rows] = \
                block[:, i * cfg.rows:(i + 1) * cfg.rows]
        steps.append(Step(_segment_program(cfg, model, segment, len(block)), segment.weights,
                          list(host_in), outputs=[(start, len(block))]))
    return steps


def segment_outputs(plan, segment, steps, host_rows):
    """The int8 output columns of ``segment`` (shape (items, its output columns)) from the
    rows its programs sent to the host."""
    cfg, model = plan.cfg, plan.model
    last = model.layers[segment.layers[-1]]
    j0, j1 = segment.n_tiles if segment.n_tiles else (0, _tiles(last.n, cfg.cols))
    items = sum(step.outputs[0][1] for step in steps)
    out = np.zeros((items, (j1 - j0) * cfg.cols), np.int64)
    for step, rows in zip(steps, host_rows):
        start, count = step.outputs[0]
        rows = np.array([np.resize(np.asarray(r)[:cfg.cols], cfg.cols) for r in rows])
        if len(rows) != count * (j1 - j0):
            raise RuntimeError(f"a program sent {len(rows)} rows, expected {count * (j1 - j0)}")
        for j in range(j1 - j0):
            out[start:start + count, j * cfg.cols:(j + 1) * cfg.cols] = rows[j * count:(j + 1) * count]
    columns = min(last.n, j1 * cfg.cols) - j0 * cfg.cols
    return out[:, :columns]
