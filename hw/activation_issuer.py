"""The activation issuer: ACTIVATE rows sent to the datapath beside the sequencer, so that
requantisation overlaps the matrix products as in TPU v1."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import END_BITS, FIELD_BITS
from .datapath import command_layouts

__all__ = ["ActivationIssuer", "ACTIVATE_REQUEST_LAYOUT", "ActivationView"]

#: An ACTIVATE, as the sequencer hands it over, with the ends of its row ranges
#: (``acc_addr + count`` and ``ub_addr + count``, which the sequencer keeps in registers).
ACTIVATE_REQUEST_LAYOUT = data.StructLayout({
    "acc_addr": FIELD_BITS, "ub_addr": FIELD_BITS, "count": FIELD_BITS,
    "acc_end": END_BITS, "ub_end": END_BITS})


class ActivationView(wiring.Signature):
    """The activation under way, as the activation issuer shows it to the sequencer's
    hazard checks: ``busy`` and the accumulator rows ``[acc_low, acc_high)`` it has still
    to read; the UB rows ``[ub_low, ub_high)`` of every activation whose rows are still on
    their way."""

    def __init__(self):
        super().__init__({"busy": Out(1), **{name: Out(END_BITS) for name in (
            "acc_low", "acc_high", "ub_low", "ub_high")}})


class ActivationIssuer(wiring.Component):
    """Takes an ACTIVATE (accumulator rows ``acc_addr...`` into UB rows ``ub_addr...``,
    ``count`` of them) when idle, and issues one ``activate`` command per cycle to the
    datapath while the sequencer goes on with later instructions.

    ``activation`` (an :class:`ActivationView`) describes the accumulator rows the
    ACTIVATE under way has still to read and covers the UB rows of every activation whose
    rows are still on their way (``draining``, from the datapath, says that earlier rows
    are): the sequencer holds back a MATMUL that would overwrite accumulator rows not
    yet read, or read UB rows not yet written.

    Latency: the first row is issued the cycle after the request is taken; ``count`` rows
    take ``count`` cycles.
    """

    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            "request": In(stream.Signature(ACTIVATE_REQUEST_LAYOUT)),
            "activate": Out(stream.Signature(command_layouts(cfg)["activate"])),
            "draining": In(1),
            "activation": Out(ActivationView()),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        # The sequencer hands over only ACTIVATEs within both memories.
        row_bits = cfg.row_bits
        # The rows of the row offered, counters of their own: no adder on the addresses.
        acc_row, ub_row = Signal(row_bits), Signal(row_bits)
        last = Signal()              # the row offered is the last one (a register: no adder
        #                              or comparison in front of ``busy``)
        m.d.comb += [
            self.request.ready.eq(~self.activation.busy),
            self.activate.valid.eq(self.activation.busy),
            self.activate.payload.acc_addr.eq(acc_row),
            self.activate.payload.ub_addr.eq(ub_row),
        ]
        with m.If(self.activate.valid & self.activate.ready):
            m.d.sync += [acc_row.eq(acc_row + 1), ub_row.eq(ub_row + 1),
                         last.eq(acc_row + 2 == self.activation.acc_high)]
            with m.If(last):
                m.d.sync += self.activation.busy.eq(0)
        with m.If(self.request.valid & self.request.ready):
            req = self.request.payload
            acc_addr, ub_addr = req.acc_addr[:row_bits], req.ub_addr[:row_bits]
            new_high = req.ub_end[:row_bits]
            view = self.activation
            m.d.sync += [view.busy.eq(req.count != 0), view.acc_low.eq(acc_addr),
                         view.acc_high.eq(req.acc_end[:row_bits]), acc_row.eq(acc_addr),
                         ub_row.eq(ub_addr), last.eq(req.count == 1)]
            with m.If(self.draining):
                # Rows of the ACTIVATE before are still on their way: cover both.
                m.d.sync += [view.ub_low.eq(Mux(ub_addr < view.ub_low, ub_addr, view.ub_low)),
                             view.ub_high.eq(Mux(new_high > view.ub_high, new_high,
                                                 view.ub_high))]
            with m.Else():
                m.d.sync += [view.ub_low.eq(ub_addr), view.ub_high.eq(new_high)]
        return m
