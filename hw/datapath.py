"""The whole datapath: Unified Buffer -> matrix unit -> accumulators -> activation -> UB."""

from amaranth.hdl import Module
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .accumulator_banks import AccumulatorBanks
from .accumulators import accumulator_memory, add_spacing
from .activation import PARAM_WRITE_LAYOUT, ActivationUnit
from .activation_path import activation_path
from .activation_units import activation_latency
from .matmul_feed import matmul_feed
from .matrix_unit import matrix_unit, matrix_unit_latency
from .read_ports import read_ports
from .unified_buffer import unified_buffer

__all__ = ["Datapath", "command_layouts"]


def command_layouts(cfg):
    """Payload layouts of the datapath's command streams."""
    ub_addr, acc_addr = cfg.ub_addr_width, cfg.acc_addr_width
    return {
        "matmul": data.StructLayout({"ub_addr": ub_addr, "acc_addr": acc_addr,
                                     "accumulate": 1, "new_tile": 1}),
        # What travels beside a matmul row through the matrix unit.
        "matmul_tag": data.StructLayout({"acc_addr": acc_addr, "accumulate": 1}),
        "activate": data.StructLayout({"acc_addr": acc_addr, "ub_addr": ub_addr}),
        "host_write": data.StructLayout({
            "addr": ub_addr, "data": data.ArrayLayout(cfg.operand_shape, cfg.ub_lanes),
            "mask": cfg.ub_lanes}),
        # A host read: a row of the accumulators (``acc``) or of the Unified Buffer.
        "host_read": data.StructLayout({"acc": 1, "addr": max(ub_addr, acc_addr)}),
        # Its answer: the UB's lanes sign-extended, or the accumulator words in lanes
        # ``0 .. cols - 1`` (the others 0).
        "host_row": data.ArrayLayout(cfg.acc_shape, cfg.ub_lanes),
    }


class Datapath(wiring.Component):
    """Every block of the TPU joined the way TPU v1 joins them, driven by per-row commands.

    * ``matmul``: read Unified Buffer row ``ub_addr``, multiply its first ``rows`` lanes by
      the active weight tile (switching to the next one first when ``new_tile``), and write
      or add (``accumulate``) the result into accumulator row ``acc_addr``. One command per
      cycle streams back to back, except that a row adding to the accumulator row of one
      of the rows just before it waits until :func:`~tpuer.hw.accumulators.add_spacing`
      cycles (2, or 3 with ``cfg.memory_read_latency`` 2) separate the two in the matrix
      unit.
    * ``activate``: read accumulator row ``acc_addr``, requantise it with ``params`` and
      write it into lanes ``0 .. cols - 1`` of Unified Buffer row ``ub_addr``. One per cycle.
    * ``weights``: weight rows into the Weight FIFO.
    * ``host_write`` and ``host_read`` -> ``host_data``: the host's access to both memories
      (reads of either answered in order through one queue of :func:`host_answer_slots`
      rows). The datapath's own traffic goes first: a host read waits while ``matmul``
      reads the Unified Buffer, a host read of the accumulators while ``activate`` reads
      them, a host write while an activated row is written.

    Commands of one stream execute in order; the streams are not ordered against each
    other. Whoever drives them (the sequencer) waits for ``busy`` to fall, or otherwise
    keeps the dependencies, before it activates rows that a matrix product writes.

    Members
    -------
    params : In(ActivationUnit params layout)
        Requantisation parameters; change them only while ``busy`` is low.
    param_write : In(PARAM_WRITE_LAYOUT)
        With a lane-serial activation unit, its biases and multipliers (which it keeps
        itself; those of ``params`` are unused): a write per cycle, only while ``busy`` is
        low.
    matmul_pending : In(1)
        High in every cycle ``matmul.valid`` is, and in any others where a ``matmul``
        command may come (its driver's instruction still waits on other checks). With
        ``cfg.memory_read_latency`` 2 (fast clocks) it alone chooses the Unified Buffer's
        read address, and host reads of the Unified Buffer wait while it is high, so that
        neither waits for ``valid``'s later decisions. (Tie it to ``matmul.valid`` where
        nothing earlier is known.)
    busy : Out(1)
        Some command is still in flight.
    matmul_busy, activate_busy : Out(1)
        A ``matmul`` (up to its accumulator write) or an ``activate`` (up to its UB write)
        is still in flight.
    acc_bank_busy : Out(2)
        Bit ``h``: some accepted ``matmul`` row has not yet been written into accumulator
        half ``h`` (rows below ``acc_depth // 2``, or from there on), so that a reader of
        one half need not wait for products going into the other. From registers.
    vector_issued : Out(1)
        A vector entered the matrix unit this cycle (the MXU-busy counter counts these).
    weight_stall, overflow, range_error : Out(1)
        A ``new_tile`` is waiting for its weights; an accumulation saturated; a command
        named an address past the end of a memory (one-cycle pulses, as the blocks raise
        them).

    Latency: a ``matmul`` command accepted in cycle ``t`` has its accumulator row written at
    the end of cycle ``t + 1 + R + S + M`` (:attr:`matmul_latency`; ``R`` is
    ``cfg.memory_read_latency``, ``S`` the accumulators'
    :func:`~tpuer.hw.accumulators.add_spacing`, ``M`` the matrix unit's
    :func:`~tpuer.hw.matrix_unit.matrix_unit_latency`, ``rows + cols + multiply_latency``);
    an ``activate`` accepted in cycle ``t`` writes its UB row at the end of cycle
    ``t + R + L`` (:attr:`activate_latency`), where ``L`` is the activation unit's latency
    (:func:`~tpuer.hw.activation_units.activation_latency`: 8, 11 with ``multiply_latency`` 2,
    12 with 3;
    with ``cfg.activation_steps``, ``cols * (steps + 44) + 1``, and the next
    ``activate`` is taken only when the unit can take its row).
    """

    def __init__(self, cfg):
        self._cfg = cfg
        layouts = command_layouts(cfg)
        self.matmul_layout = layouts["matmul"]
        self.activate_layout = layouts["activate"]
        self.host_write_layout = layouts["host_write"]
        self.host_read_layout = layouts["host_read"]
        self.host_row_layout = layouts["host_row"]
        self.params_layout = ActivationUnit.params_layout_for(cfg)
        super().__init__({
            "weights": In(stream.Signature(data.ArrayLayout(cfg.operand_shape, cfg.cols))),
            "matmul": In(stream.Signature(self.matmul_layout)),
            "matmul_pending": In(1),
            "activate": In(stream.Signature(self.activate_layout)),
            "params": In(self.params_layout),
            "param_write": In(PARAM_WRITE_LAYOUT),
            "host_write": In(stream.Signature(self.host_write_layout)),
            "host_read": In(stream.Signature(layouts["host_read"])),
            "host_data": Out(stream.Signature(self.host_row_layout)),
            "busy": Out(1),
            "matmul_busy": Out(1),
            "acc_bank_busy": Out(2),
            "activate_busy": Out(1),
            "vector_issued": Out(1),
            "weight_stall": Out(1),
            "overflow": Out(1),
            "range_error": Out(1),
        })

    @property
    def matmul_latency(self):
        cfg = self._cfg
        return 1 + cfg.memory_read_latency + add_spacing(cfg) + matrix_unit_latency(cfg)

    @property
    def activate_latency(self):
        return self._cfg.memory_read_latency + activation_latency(self._cfg)

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        tag = command_layouts(cfg)["matmul_tag"]
        m.submodules.ub = ub = unified_buffer(cfg)
        m.submodules.mxu = mxu = matrix_unit(cfg, tag_shape=tag)
        # On an iCE40 each accumulator lane is written as its column leaves the array, so
        # that no de-skew registers line the columns up.
        m.submodules.acc = acc = accumulator_memory(cfg, platform)
        m.submodules.feed = feed = matmul_feed(cfg, command_layout=self.matmul_layout,
                                               row_layout=mxu.row_layout)
        m.submodules.activation = activation = activation_path(
            cfg, activate_layout=self.activate_layout)
        m.submodules.ports = ports = read_ports(
            cfg, host_read_layout=self.host_read_layout, host_row_layout=self.host_row_layout)
        m.submodules.banks = banks = AccumulatorBanks(cfg)

        wiring.connect(m, wiring.flipped(self.weights), mxu.weights)
        wiring.connect(m, wiring.flipped(self.matmul), feed.matmul)
        wiring.connect(m, feed.rows, mxu.rows)
        acc.take_results(m, mxu)
        wiring.connect(m, wiring.flipped(self.activate), activation.activate)
        wiring.connect(m, wiring.flipped(self.host_read), ports.host_read)
        wiring.connect(m, ports.host_data, wiring.flipped(self.host_data))
        matmul_taken = self.matmul.valid & self.matmul.ready
        m.d.comb += [
            feed.read_data.eq(ub.read_data),
            activation.params.eq(self.params),
            activation.param_write.eq(self.param_write),
            activation.acc_data.eq(acc.read_data),
            banks.taken.eq(matmul_taken),
            banks.taken_addr.eq(self.matmul.payload.acc_addr),
            banks.result_valid.eq(mxu.results.valid),
            banks.result_addr.eq(mxu.results.payload.tag.acc_addr),
            self.acc_bank_busy.eq(banks.busy),
        ]

        # --- the memories' read ports: the datapath's own reads, then the host's ---------
        m.d.comb += [
            ports.matmul.valid.eq(self.matmul.valid),
            ports.matmul.pending.eq(self.matmul_pending),
            ports.matmul.taken.eq(matmul_taken),
            ports.matmul.addr.eq(self.matmul.payload.ub_addr),
            # An activate's read is made whenever it is offered (taken or not).
            ports.activate.valid.eq(self.activate.valid),
            ports.activate.pending.eq(self.activate.valid),
            ports.activate.taken.eq(self.activate.valid),
            ports.activate.addr.eq(self.activate.payload.acc_addr),
            ub.read_addr.eq(ports.ub.addr), ub.read_en.eq(ports.ub.en),
            ports.ub.data.eq(ub.read_data),
            acc.read_addr.eq(ports.acc.addr), acc.read_en.eq(ports.acc.en),
            ports.acc.data.eq(acc.read_data),
        ]

        # --- UB write port: activated rows first, then the host -------------------------
        # The row, address and mask are the host's whenever no activated row is written,
        # so that only the write enable waits for the host's (late) valid.
        activated = activation.o
        m.d.comb += [self.host_write.ready.eq(~activated.valid),
                     ub.write_en.eq(activated.valid | self.host_write.valid)]
        with m.If(activated.valid):
            m.d.comb += [ub.write_addr.eq(activated.payload.tag),
                         ub.write_mask.eq((1 << cfg.cols) - 1)]
            for lane in range(cfg.cols):
                m.d.comb += ub.write_data[lane].eq(activated.payload.data[lane])
        with m.Else():
            m.d.comb += [ub.write_addr.eq(self.host_write.payload.addr),
                         ub.write_data.eq(self.host_write.payload.data),
                         ub.write_mask.eq(self.host_write.payload.mask)]

        m.d.comb += [
            self.matmul_busy.eq(feed.busy | mxu.busy | acc.write_pending),
            self.activate_busy.eq(activation.busy),
            self.busy.eq(self.matmul_busy | self.activate_busy),
            self.vector_issued.eq(mxu.rows.valid & mxu.rows.ready),
            self.weight_stall.eq(mxu.weight_stall),
            self.overflow.eq(acc.overflow),
            self.range_error.eq(ub.range_error | acc.range_error),
        ]
        return m
