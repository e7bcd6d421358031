"""The matrix unit: Weight FIFO, weight loader, data setup, systolic array and de-skew."""

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .arith import wrapped_increment
from .data_setup import DiagonalSkew
from .delay_line import delayed
from .systolic_array import systolic_array
from .weight_fifo import WeightFIFO

__all__ = ["MatrixUnit", "RegisteredMatrixUnit", "matrix_unit", "matrix_unit_latency"]


def matrix_unit_latency(cfg):
    """Cycles from the matrix unit's accepting a vector to its result: one in the input
    register, ``cfg.multiply_latency`` in the cells' multipliers, ``rows`` down the array
    and ``cols - 1`` across it (the skew of the last column, which the output deskew gives
    every column). The datapath, the cycle model and the compiler's schedules all take it
    from here."""
    return cfg.rows + cfg.cols + cfg.multiply_latency


class MatrixUnit(wiring.Component):
    """Multiplies a stream of input vectors by weight tiles, one vector per cycle.

    Weight tiles (``cfg.rows`` rows of ``cfg.cols`` weights, row 0 first) are pushed into
    ``weights``. They queue in the Weight FIFO and are shifted, one row per cycle, into the
    array's shadow weights as soon as the shadow is free, while the active tile keeps
    computing.

    Each input vector on ``rows`` is multiplied by the active tile. A vector whose
    ``new_tile`` flag is set first switches the array to the next tile; the switch travels
    through the array with that vector's wavefront, so vectors before it still use the old
    tile and there is no drain and no bubble. If the next tile is not yet fully loaded,
    ``rows.ready`` stays low and ``weight_stall`` is high until it is. Loading of the tile
    after that starts in the cycle of the switch, so a tile can be switched in every
    ``cfg.rows`` cycles: products of at least ``cfg.rows`` vectors per tile never wait for
    weights once the FIFO is ahead.

    ``tag`` is carried alongside each vector unchanged (for example the accumulator address
    its result goes to). Results cannot be held back: ``results`` has no ``ready``.

    Members
    -------
    weights : In(stream.Signature(ArrayLayout(operand, cols)))
        Weight rows into the Weight FIFO.
    rows : In(stream.Signature(StructLayout({"data", "new_tile", "tag"})))
        Input vectors of ``cfg.rows`` operands.
    results : Out(stream.Signature(StructLayout({"data", "tag"}), always_ready=True))
        ``data @ W`` as ``cfg.cols`` accumulator words, in input order.
    weight_stall : Out(1)
        A vector is waiting for its weight tile this cycle.
    tile_ready : Out(1)
        A complete tile waits in the shadow weights.
    busy : Out(1)
        Some accepted vector has not yet left on ``results`` (in
        :class:`RegisteredMatrixUnit` a register, of the same value).
    upcoming : Out(StructLayout({"valid", "tag"}))
        What ``results.valid`` and ``results.payload.tag`` will be in the next cycle (so
        that the accumulator memory can read the row a result adds to a cycle ahead).
    columns : Out(ArrayLayout(StructLayout({"valid", "tag", "sum", "next_valid",
    "next_tag"}), cols))
        Each column's sum as it leaves the array, before the de-skew lines the columns up:
        column ``j``'s comes ``cols - 1 - j`` cycles before ``results`` with its vector's
        ``valid`` and ``tag``, and what they will be in the next cycle. A user that takes
        the columns so, and not ``results.payload.data``, leaves the de-skew registers
        unused (the tools remove them).

    Latency: a vector accepted in cycle ``t`` leaves in cycle ``t + latency`` where
    :attr:`latency` is :func:`matrix_unit_latency` (``rows + cols + multiply_latency``).
    """

    def __init__(self, cfg, *, tag_shape=unsigned(16)):
        self._cfg = cfg
        self._tag_shape = tag_shape
        self.row_layout = data.StructLayout({
            "data": data.ArrayLayout(cfg.operand_shape, cfg.rows),
            "new_tile": 1,
            "tag": tag_shape,
        })
        self.result_layout = data.StructLayout({
            "data": data.ArrayLayout(cfg.acc_shape, cfg.cols),
            "tag": tag_shape,
        })
        super().__init__({
            "weights": In(stream.Signature(data.ArrayLayout(cfg.operand_shape, cfg.cols))),
            "rows": In(stream.Signature(self.row_layout)),
            "results": Out(stream.Signature(self.result_layout, always_ready=True)),
            "weight_stall": Out(1),
            "tile_ready": Out(1),
            "upcoming": Out(data.StructLayout({"valid": 1, "tag": tag_shape})),
            "columns": Out(data.ArrayLayout(data.StructLayout({
                "valid": 1, "tag": tag_shape, "sum": cfg.acc_shape,
                "next_valid": 1, "next_tag": tag_shape}), cfg.cols)),
            "busy": Out(1),
        })

    @property
    def config(self):
        return self._cfg

    @property
    def latency(self):
        """Cycles from accepting a vector to its result on ``results``."""
        return matrix_unit_latency(self._cfg)

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        m.submodules.weight_fifo = weight_fifo = WeightFIFO(cfg)
        m.submodules.array = array = systolic_array(cfg, platform)
        lane = data.StructLayout({"act": cfg.operand_shape, "switch": 1})
        m.submodules.skew = skew = DiagonalSkew(lane_shape=lane, lanes=cfg.rows)
        m.submodules.deskew = deskew = DiagonalSkew(
            lane_shape=cfg.acc_shape, lanes=cfg.cols, reverse=True)

        wiring.connect(m, wiring.flipped(self.weights), weight_fifo.w)

        # --- weight loader: FIFO -> shadow weights, one row per cycle ---------------------
        tile_ready = Signal()       # all rows of the next tile are in the shadow weights
        load_index = Signal(range(cfg.rows))
        switch = Signal()           # the vector accepted this cycle switches tiles
        may_load = ~tile_ready | switch
        loading = Signal()
        m.d.comb += [
            loading.eq(weight_fifo.r.valid & may_load),
            weight_fifo.r.ready.eq(may_load),
        ]
        weight_bus = (array.weight_row, array.weight_index, array.weight_valid)
        loaded = (weight_fifo.r.payload, load_index, loading)
        bus_domain = self._weight_bus_domain(m)
        bus_domain += [port.eq(value) for port, value in zip(weight_bus, loaded)]
        last_row = loading & (load_index == cfg.rows - 1)
        with m.If(loading):
            m.d.sync += load_index.eq(wrapped_increment(load_index, cfg.rows))
        m.d.sync += tile_ready.eq(last_row | (tile_ready & ~switch))

        # --- input stage: accept, register, skew ------------------------------------------
        m.d.comb += [
            self.rows.ready.eq(~self.rows.payload.new_tile | tile_ready),
            switch.eq(self.rows.valid & self.rows.ready & self.rows.payload.new_tile),
            self.weight_stall.eq(self.rows.valid & self.rows.payload.new_tile & ~tile_ready),
            self.tile_ready.eq(tile_ready),
        ]
        # ``held`` takes the payload in every cycle, without an enable (one would wait for
        # the handshake): what it holds after a cycle without a vector is never valid, and
        # goes through the array as a wavefront of its own whose results are dropped.
        held = Signal(self.row_layout)
        held_valid = Signal()
        m.d.sync += [held_valid.eq(self.rows.valid & self.rows.ready),
                     held.eq(self.rows.payload)]
        for i in range(cfg.rows):
            # The held vector enters the array in the cycle its successor is accepted, so a
            # switch raised now takes effect exactly between the two.
            m.d.comb += [skew.i[i].act.eq(held.data[i]), skew.i[i].switch.eq(switch),
                         array.act_in[i].eq(skew.o[i].act),
                         array.switch_in[i].eq(skew.o[i].switch)]
        m.d.comb += deskew.i.eq(array.psum_out)

        # --- sideband: valid and tag travel beside the wavefront --------------------------
        cycles = matrix_unit_latency(cfg) - 1
        in_flight = delayed(m, held_valid, cycles, name="valid")
        stages = list(zip(in_flight, delayed(m, held.tag, cycles, name="tag", reset_less=True)))
        (upcoming_valid, upcoming_tag), (valid, tag) = stages[-2], stages[-1]
        # Column j leaves the array cols - 1 - j cycles before the last one.
        for j in range(cfg.cols):
            column = self.columns[j]
            at = len(stages) - 1 - (cfg.cols - 1 - j)
            m.d.comb += [column.sum.eq(array.psum_out[j]),
                         column.valid.eq(stages[at][0]), column.tag.eq(stages[at][1]),
                         column.next_valid.eq(stages[at - 1][0]),
                         column.next_tag.eq(stages[at - 1][1])]
        m.d.comb += [
            self.upcoming.valid.eq(upcoming_valid),
            self.upcoming.tag.eq(upcoming_tag),
            self.results.valid.eq(valid),
            self.results.payload.data.eq(deskew.o),
            self.results.payload.tag.eq(tag),
        ]
        self._busy(m, in_flight)
        return m

    def _weight_bus_domain(self, m):
        """The domain of the weight rows into the array's shadow weights: as loaded."""
        return m.d.comb

    def _busy(self, m, in_flight):
        """``busy`` from the stages' flags."""
        m.d.comb += self.busy.eq(Cat(*in_flight).any())


class RegisteredMatrixUnit(MatrixUnit):
    """A :class:`MatrixUnit` for fast clocks (``cfg.control_registers`` 1).

    With more than one row, a weight row goes into the array's shadow weights a cycle
    later, from a register: the decision to load (which waits for the switch, so for the
    vector's handshake) then reaches a register, not the enables of every shadow weight.
    That is still in time: the switch that takes the tile reaches row ``i`` ``i`` cycles
    after row 0 and comes a cycle after the last row is loaded at the soonest, so each
    row's write lands ``rows - 1 >= 1`` cycles before it (``rows`` in the direct form); and
    a row is loaded no sooner than the switch before it reaches its cells, which a later
    write cannot overtake. ``busy`` is a register set a cycle ahead (a vector enters, or
    one inside moves on), so that the sequencer's wait for an idle datapath does not start
    from an OR of every stage.

    Latency: as :class:`MatrixUnit`'s.
    """

    def _weight_bus_domain(self, m):
        # (A single row has no cycle to spare.)
        return m.d.sync if self._cfg.rows > 1 else m.d.comb

    def _busy(self, m, in_flight):
        m.d.sync += self.busy.eq((self.rows.valid & self.rows.ready) |
                                 Cat(*in_flight[:-1]).any())


def matrix_unit(cfg, *, tag_shape=unsigned(16)):
    """The matrix unit ``cfg`` asks for: :class:`RegisteredMatrixUnit` with
    ``cfg.control_registers``, else :class:`MatrixUnit`."""
    return (RegisteredMatrixUnit if cfg.control_registers else MatrixUnit)(
        cfg, tag_shape=tag_shape)
