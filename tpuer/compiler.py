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
activation of tile ``j`` is issued after the first product of tile ``j + 1`` (in the other
half), and the activation issuer requantises its rows while the matrix unit goes on.
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
from .quantize import QuantizedModel

__all__ = ["CompileError", "Segment", "Plan", "compile_model", "compiled", "segment_program"]


class CompileError(ValueError):
    """The model does not fit the configured TPU; the message says what and by how much."""


@dataclass
class Segment:
    """Layers ``layers`` (indices into the model) run as one chain. A layer too big for one
    program is cut: ``n_tiles`` is the range of its output tiles this segment makes, and
    ``k_tiles`` the range of input tiles it sums (the accumulators keep the partial sums
    from one program to the next; only the segment of the last input tiles activates and
    sends the result)."""
    layers: list
    n_tiles: tuple = None
    k_tiles: tuple = None
    block: int = 0                      # input rows per program
    weights: np.ndarray = None          # (tiles, rows, cols), in the order of use
    program_length: int = 0
    programs: dict = field(default_factory=dict, repr=False)   # by block size


@dataclass
class Plan:
    """A model compiled for a configuration: ``units`` run one after another; the
    segments of a unit are the parts of one layer cut along its input tiles, whose
    programs alternate block by block. ``segments`` lists them all."""
    cfg: object
    model: object
    units: list = field(default_factory=list)
    segments: list = field(default_factory=list)


def _tiles(count, size):
    return -(-count // size)


def _layer_tiles(cfg, layer, segment):
    """(first input tile, end, first output tile, end) of ``layer`` in ``segment``."""
    k0, k1 = segment.k_tiles or (0, _tiles(layer.k, cfg.rows))
    j0, j1 = segment.n_tiles or (0, _tiles(layer.n, cfg.cols))
    return k0, k1, j0, j1


def _is_last_part(cfg, model, segment):
    layer = model.layers[segment.layers[-1]]
    return segment.k_tiles is None or segment.k_tiles[1] == _tiles(layer.k, cfg.rows)


def _tiled(cfg, layer):
    """``layer``'s weights zero-padded to whole tiles, as an array of tiles indexed
    [output tile, input tile] (a view: no copy per tile)."""
    kt, nt = _tiles(layer.k, cfg.rows), _tiles(layer.n, cfg.cols)
    w = np.zeros((kt * cfg.rows, nt * cfg.cols), np.int64)
    w[:layer.k, :layer.n] = layer.weights
    return w.reshape(kt, cfg.rows, nt, cfg.cols).transpose(2, 0, 1, 3)


def _weight_tiles(cfg, tiled, layer, segment):
    """The weight tiles of ``layer`` (``tiled``: its :func:`_tiled`) in ``segment``, in
    the order of use."""
    k0, k1, j0, j1 = _layer_tiles(cfg, layer, segment)
    return tiled[j0:j1, k0:k1].reshape(-1, cfg.rows, cfg.cols)


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
    shapes = [_layer_tiles(cfg, layer, segment) for layer in layers]
    tiles_total = sum((k1 - k0) * (j1 - j0) for k0, k1, j0, j1 in shapes)
    region = block * max(max(k1 - k0, j1 - j0) for k0, k1, j0, j1 in shapes)
    last_part = _is_last_part(cfg, model, segment)
    half = cfg.acc_depth // 2
    ahead = min(tiles_total, isa.tiles_held(cfg))
    # The input arrives one tile at a time, each transfer overlapping the products of the
    # tile before it (the DMA engine moves one transfer while the next waits).
    program = [isa.read_weights(0, ahead), isa.read_host(0, block)]
    inputs_sent = 1
    read = ahead
    state = {}
    source, target = 0, region

    def matmuls(k0, k1, j, count, after_first=None):
        nonlocal read, inputs_sent
        for i in range(k1 - k0):
            if inputs_sent < shapes[0][1] - shapes[0][0] and inputs_sent == i + 1:
                program.append(isa.read_host(inputs_sent * block, block))
                inputs_sent += 1
            program.append(isa.matmul(source + i * block, (count % 2) * half, block,
                                      accumulate=i > 0 or k0 > 0, switch=True))
            if read < tiles_total:
                program.append(isa.read_weights(read, 1))
                read += 1
            if i == 0 and after_first is not None:
                after_first()

    for layer, (k0, k1, j0, j1) in zip(layers, shapes):
        if not last_part:           # partial sums only: they stay in the accumulators
            for count, j in enumerate(range(j0, j1)):
                matmuls(k0, k1, j, count)
            program.append(isa.halt())
            return program
        low, high = layer.clamp
        program += [isa.config(param, int(value)) for param, value in (
            (ConfigParam.ZERO_POINT, layer.output_zero_point), (ConfigParam.RELU, layer.relu),
            (ConfigParam.ROUNDING, layer.rounding),
            (ConfigParam.CLAMP_MIN, cfg.operand_min if low is None else low),
            (ConfigParam.CLAMP_MAX, cfg.operand_max if high is None else high))]

        def activate(j, count):
            lanes = range(j * cfg.cols, (j + 1) * cfg.cols)
            for param, values in ((ConfigParam.BIAS, layer.bias),
                                  (ConfigParam.MULTIPLIER, layer.multiplier),
                                  (ConfigParam.SHIFT, layer.shift)):
                _config_lanes(cfg, param, [values[c] if c < layer.n else None for c in lanes],
                              state, program)
            program.append(isa.activate((count % 2) * half, target + (j - j0) * block, block))

        for count, j in enumerate(range(j0, j1)):
            # Tile j - 1 is activated once the first products of tile j are under way (in
            # the other accumulator half): the activation issuer then works beside the
            # matrix unit, and its products have drained by the time it starts.
            matmuls(k0, k1, j, count,
                    after_first=(lambda j=j, count=count: activate(j - 1, count - 1))
                    if count > 0 else None)
        activate(j1 - 1, j1 - j0 - 1)
        source, target = target, source
    program.append(isa.write_host(source, block * (shapes[-1][3] - shapes[-1][2])))
    program.append(isa.halt())
    return program


def _fits(cfg, model, segment):
    """Why ``segment`` does not fit (a message), or ``None``; sets its block size."""
    layers = [model.layers[index] for index in segment.layers]
    shapes = [_layer_tiles(cfg, layer, segment) for layer in layers]
    tiles_total = sum((k1 - k0) * (j1 - j0) for k0, k1, j0, j1 in shapes)
    if tiles_total > cfg.weight_tiles:
        return (f"needs {tiles_total} weight tiles; the weight memory holds "
                f"{cfg.weight_tiles} (Config.weight_tiles)")
    per_row = max(max(k1 - k0, j1 - j0) for k0, k1, j0, j1 in shapes)
    block = min(cfg.ub_depth // (2 * per_row), cfg.acc_depth // 2)
    if segment.k_tiles is not None:
        block = min(block, cfg.acc_depth // 2 // (shapes[0][3] - shapes[0][2]))
    if block < 1:
        return (f"needs {2 * per_row} Unified Buffer rows per input row; the Unified Buffer "
                f"has {cfg.ub_depth} (Config.ub_depth)")
    length = len(_segment_program(cfg, model, segment, 1))
    if length > cfg.program_depth:
        return (f"needs a program of {length} instructions; the instruction memory holds "
                f"{cfg.program_depth} (Config.program_depth)")
    segment.block = block
    segment.program_length = length
    return None


def _chains(previous, layer, cfg):
    return (previous is not None and previous.kind == "dense" and layer.kind == "dense"
            and cfg.rows == cfg.cols)


def compile_model(cfg, model, *, chain=True):
    """Segments of ``model`` for configuration ``cfg``; with ``chain`` False every layer
    is a segment of its own. Raises :class:`CompileError` when a layer cannot fit."""
    if not isinstance(model, QuantizedModel):
        raise TypeError(f"model must be a tpuer.QuantizedModel (from tpuer.quantize), not "
                        f"{type(model).__name__}")
    if cfg.operand_width != 8 or cfg.acc_width != 32:
        raise CompileError(f"the compiler needs int8 operands and int32 accumulators, not "
                           f"{cfg.operand_width} and {cfg.acc_width} bits")
    plan = Plan(cfg, model)
    current = None
    for index, layer in enumerate(model.layers):
        if chain and current is not None and _chains(model.layers[index - 1], layer, cfg):
            longer = Segment(current.layers + [index])
            if _fits(cfg, model, longer) is None:
                plan.units[-1] = [longer]
                current = longer
                continue
        whole = Segment([index])
        problem = _fits(cfg, model, whole)
        if problem is None:
            plan.units.append([whole])
            current = whole
            continue
        plan.units.extend(_split(cfg, model, index, problem))
        current = None
    plan.segments = [segment for unit in plan.units for segment in unit]
    tiled = {}
    for segment in plan.segments:
        for index in segment.layers:
            if index not in tiled:
                tiled[index] = _tiled(cfg, model.layers[index])
        segment.weights = np.concatenate([
            _weight_tiles(cfg, tiled[index], model.layers[index], segment)
            for index in segment.layers])
    return plan


def compiled(cfg, model):
    """:func:`compile_model` of ``model`` for ``cfg``, made once and kept in the model
    (:attr:`~tpuer.quantize.QuantizedModel.plans`) for every later call."""
    plan = model.plans.get(cfg)
    if plan is None:
        plan = model.plans[cfg] = compile_model(cfg, model)
    return plan


def segment_program(plan, segment, size):
    """The program of a block of ``size`` rows of ``segment``, made once."""
    program = segment.programs.get(size)
    if program is None:
        program = segment.programs[size] = _segment_program(plan.cfg, plan.model, segment,
                                                            size)
    return program


def _split(cfg, model, index, problem):
    """Units of a layer too big for one program: groups of its output tiles (the input
    sent to each), and if one output tile is still too big, groups of its input tiles
    summed in the accumulators over several programs."""
    layer = model.layers[index]
    n_tiles, k_tiles = _tiles(layer.n, cfg.cols), _tiles(layer.k, cfg.rows)
    size = n_tiles
    while size > 1 and _fits(cfg, model, Segment([index], (0, size))) is not None:
        size //= 2
    if _fits(cfg, model, Segment([index], (0, size))) is None:
        units = []
        for j0 in range(0, n_tiles, size):
            part = Segment([index], (j0, min(n_tiles, j0 + size)))
            trouble = _fits(cfg, model, part)
            if trouble is not None:
                raise CompileError(f"layer {index}, output tiles from {j0}: {trouble}")
            units.append([part])
        return units
    def parts_of(j, size):
        return [Segment([index], (j, j + 1), (k0, min(k_tiles, k0 + size)))
                for k0 in range(0, k_tiles, size)]

    def problem_of(parts):
        return next((p for p in (_fits(cfg, model, part) for part in parts) if p), None)

    size = k_tiles
    while size > 1 and problem_of(parts_of(0, size)) is not None:
        size //= 2
    trouble = problem_of(parts_of(0, size))
    if trouble is not None:
        raise CompileError(f"layer {index} ({layer.kind}, {layer.k} x {layer.n}) does not "
                           f"fit even one tile at a time: {trouble}")
    units = []
    for j in range(n_tiles):
        parts = parts_of(j, size)
        if problem_of(parts) is not None:
            raise CompileError(f"layer {index}, output tile {j}: {problem_of(parts)}")
        block = min(part.block for part in parts)     # one block size for all the parts
        for part in parts:
            part.block = block
        units.append(parts)
    return units


def _segment_blocks(segment, items):
    """(first item, items) of each program of ``segment`` for ``items`` input rows."""
    return [(start, min(segment.block, items - start))
            for start in range(0, items, segment.block)]


def segment_templates(plan, segment, items):
    """The distinct programs of ``segment`` for ``items`` input rows, as (how many times
    it runs, program): every block is full but maybe the last."""
    sizes = [size for _start, size in _segment_blocks(segment, items)]
    return [(sizes.count(size), segment_program(plan, segment, size))
            for size in sorted(set(sizes), reverse=True)]


def segment_steps(plan, segment, rows):
    """Driver steps (one program per block) of ``segment`` for its input ``rows`` (int8,
    shape (items, K of its first layer)), made one by one as they are asked for."""
    from .driver import Step
    cfg, model = plan.cfg, plan.model
    first = model.layers[segment.layers[0]]
    k0, k1, _, _ = _layer_tiles(cfg, first, segment)
    kt = k1 - k0
    for start, size in _segment_blocks(segment, len(rows)):
        block = np.zeros((size, kt * cfg.rows), np.int64)
        part = rows[start:start + size, k0 * cfg.rows:min(first.k, k1 * cfg.rows)]
        block[:, :part.shape[1]] = part
        host_in = np.zeros((kt * size, cfg.ub_lanes), np.int64)
        # input tile i of item r is host row i * size + r
        host_in[:, :cfg.rows] = block.reshape(size, kt, cfg.rows).transpose(1, 0, 2).reshape(
            kt * size, cfg.rows)
        yield Step(segment_program(plan, segment, size), segment.weights, host_in,
                   outputs=[(start, size)], useful_macs=size * segment_macs(plan, segment))


def segment_macs(plan, segment):
    """The useful multiply-accumulates of ``segment`` per input row (its layers' parts,
    without padding)."""
    cfg, total = plan.cfg, 0
    for index in segment.layers:
        layer = plan.model.layers[index]
        k0, k1, j0, j1 = _layer_tiles(cfg, layer, segment)
        total += ((min(layer.k, k1 * cfg.rows) - k0 * cfg.rows) *
                  (min(layer.n, j1 * cfg.cols) - j0 * cfg.cols))
    return total


def segment_outputs(plan, segment, steps, host_rows):
    """The int8 output columns of ``segment`` (shape (items, its output columns)) from the
    rows its programs sent to the host."""
    cfg, model = plan.cfg, plan.model
    last = model.layers[segment.layers[-1]]
    _, _, j0, j1 = _layer_tiles(cfg, last, segment)
    items = sum(step.outputs[0][1] for step in steps)
    out = np.zeros((items, (j1 - j0) * cfg.cols), np.int64)
    for step, rows in zip(steps, host_rows):
        start, count = step.outputs[0]
        rows = np.asarray(rows)[:, :cfg.cols]
        if len(rows) != count * (j1 - j0):
            raise RuntimeError(f"a program sent {len(rows)} rows, expected {count * (j1 - j0)}")
        for j in range(j1 - j0):
            block = rows[j * count:(j + 1) * count]
            out[start:start + count, j * cfg.cols:(j + 1) * cfg.cols] = block
    columns = min(last.n, j1 * cfg.cols) - j0 * cfg.cols
    return out[:, :columns]
