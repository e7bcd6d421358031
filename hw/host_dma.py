"""The host DMA engine: READ_HOST and WRITE_HOST rows, moved while the matrix unit works."""

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import END_BITS, DMAKind
from .datapath import command_layouts
from .read_ports import host_answer_slots

__all__ = ["HostDMA", "RegisteredHostDMA", "host_dma", "DMA_REQUEST_LAYOUT", "TransferView"]

#: A transfer request, as the sequencer sends it.
DMA_REQUEST_LAYOUT = data.StructLayout({"kind": DMAKind, "addr": 16, "count": 16})


class TransferView(wiring.Signature):
    """The transfer under way, as the host DMA engine shows it to the sequencer's hazard
    checks: ``busy``, its ``kind`` and its rows ``[low, high)``."""

    def __init__(self):
        super().__init__({"busy": Out(1), "kind": Out(DMAKind), "low": Out(END_BITS),
                          "high": Out(END_BITS)})


class HostDMA(wiring.Component):
    """Moves rows between the host streams and the memories, one transfer at a time, one
    row per cycle, beside the sequencer (which goes on issuing other instructions).

    * ``DMAKind.READ_HOST``: ``count`` rows from ``host_in`` into UB rows ``addr...``;
    * ``DMAKind.WRITE_UB`` / ``WRITE_ACC``: UB or accumulator rows ``addr...`` to
      ``host_out`` (the datapath's ``host_data`` rows: operands sign-extended, accumulator
      words in lanes ``0 .. cols - 1``).

    ``cancel`` drops the transfer under way; the answers of reads it had issued are taken
    and dropped before the next one starts. ``transfer`` (a :class:`TransferView`)
    describes the transfer under way, its whole address range included, so that the
    sequencer can hold back instructions that touch those rows.

    Latency: a transfer of ``n`` rows takes ``n`` cycles (``n + 1 + memory_read_latency``
    for writes to the host)
    when the host keeps up and the datapath's own traffic leaves the memory port free.
    """

    def __init__(self, cfg):
        self._cfg = cfg
        layouts = command_layouts(cfg)
        self.host_row_layout = layouts["host_row"]
        super().__init__({
            "request": In(stream.Signature(DMA_REQUEST_LAYOUT)),
            "cancel": In(1),
            "transfer": Out(TransferView()),
            "host_in": In(stream.Signature(data.ArrayLayout(cfg.operand_shape, cfg.ub_lanes))),
            "host_out": Out(stream.Signature(self.host_row_layout)),
            "host_write": Out(stream.Signature(layouts["host_write"])),
            "host_read": Out(stream.Signature(layouts["host_read"])),
            "host_data": In(stream.Signature(self.host_row_layout)),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        # Transfers come only within a memory (the sequencer and the host interface check
        # the ranges).
        row_bits = cfg.row_bits
        base = Signal(row_bits)
        count = Signal(row_bits)
        # The row of the next write, or of the next read request: a counter of its own,
        # so that no adder sits on the memory's address.
        next_row = Signal(row_bits)
        answered = Signal(row_bits)     # rows sent to the host
        high = Signal(row_bits)         # base + count, kept in a register
        # Whether the next row written or answered is the transfer's last: registers, so
        # that only this cycle's handshake decides when ``busy`` falls.
        last_request, last_answer = Signal(), Signal()

        # Reads issued whose answers have not been taken yet (at most the datapath's
        # host_answer_slots: its answer queue and the reads on their way to it). After a
        # cancel they are still on their way: they are taken and dropped before the next
        # transfer starts, so none reaches it.
        issued_now = Signal()       # a read request is taken this cycle
        answered_now = Signal()     # an answer is taken this cycle (sent, or dropped)
        outstanding = Signal(range(host_answer_slots(cfg) + 2))
        dropping = Signal()
        m.d.comb += [self.request.ready.eq(~self.transfer.busy & ~dropping),
                     self.transfer.low.eq(base), self.transfer.high.eq(high)]
        with m.If(dropping):
            m.d.comb += [self.host_data.ready.eq(1), answered_now.eq(self.host_data.valid)]
        with m.If(self.request.valid & self.request.ready):
            payload = self.request.payload
            m.d.sync += [self.transfer.busy.eq(payload.count != 0),
                         self.transfer.kind.eq(payload.kind),
                         base.eq(payload.addr[:row_bits]), count.eq(payload.count[:row_bits]),
                         high.eq(payload.addr[:row_bits] + payload.count[:row_bits]),
                         next_row.eq(payload.addr[:row_bits]), answered.eq(0),
                         last_request.eq(payload.count == 1), last_answer.eq(payload.count == 1)]

        reading_host = self.transfer.busy & (self.transfer.kind == DMAKind.READ_HOST)
        m.d.comb += [
            self.host_write.valid.eq(reading_host & self.host_in.valid),
            self.host_write.payload.addr.eq(next_row),
            self.host_write.payload.data.eq(self.host_in.payload),
            self.host_write.payload.mask.eq((1 << cfg.ub_lanes) - 1),
            self.host_in.ready.eq(reading_host & self.host_write.ready),
        ]
        with m.If(reading_host):
            with m.If(self.host_in.valid & self.host_write.ready):
                m.d.sync += [next_row.eq(next_row + 1), last_request.eq(next_row + 2 == high)]
                with m.If(last_request):
                    m.d.sync += self.transfer.busy.eq(0)

        m.d.comb += [self.host_read.payload.acc.eq(self.transfer.kind == DMAKind.WRITE_ACC),
                     self.host_read.payload.addr.eq(next_row),
                     self.host_out.payload.eq(self.host_data.payload)]
        reads_left = self._reads_left(m, next_row, high, issued_now)
        with m.If(self.transfer.busy & (self.transfer.kind != DMAKind.READ_HOST)):
            with m.If(reads_left):
                m.d.comb += self.host_read.valid.eq(1)
                with m.If(self.host_read.ready):
                    m.d.comb += issued_now.eq(1)
                    m.d.sync += next_row.eq(next_row + 1)
            m.d.comb += [self.host_out.valid.eq(self.host_data.valid),
                         self.host_data.ready.eq(self.host_out.ready)]
            with m.If(self.host_data.valid & self.host_out.ready):
                m.d.comb += answered_now.eq(1)
                m.d.sync += [answered.eq(answered + 1), last_answer.eq(answered + 2 == count)]
                with m.If(last_answer):
                    m.d.sync += self.transfer.busy.eq(0)
        with m.If(issued_now & ~answered_now):
            m.d.sync += outstanding.eq(outstanding + 1)
        with m.Elif(answered_now & ~issued_now):
            m.d.sync += outstanding.eq(outstanding - 1)
        # None owed after this cycle; written so that this cycle's handshakes come last.
        none_left = Mux(issued_now, answered_now & (outstanding == 0),
                        Mux(answered_now, outstanding == 1, outstanding == 0))
        with m.If(dropping & none_left):
            m.d.sync += dropping.eq(0)
        with m.If(self.cancel & self.transfer.busy):
            m.d.sync += self.transfer.busy.eq(0)
            with m.If(self.transfer.kind != DMAKind.READ_HOST):
                m.d.sync += dropping.eq(~none_left)
        return m

    def _reads_left(self, m, next_row, high, issued_now):
        """Rows are left to read: a comparison."""
        return next_row != high


class RegisteredHostDMA(HostDMA):
    """A :class:`HostDMA` for fast clocks (``cfg.control_registers`` 1): whether rows are
    left to read is a register of its own, so that no comparator sits before the read
    request and the memory's enable."""

    def _reads_left(self, m, next_row, high, issued_now):
        reads_left = Signal()
        with m.If(self.request.valid & self.request.ready):
            m.d.sync += reads_left.eq(self.request.payload.count != 0)
        with m.Elif(issued_now):
            m.d.sync += reads_left.eq(next_row + 1 != high)
        return reads_left


def host_dma(cfg):
    """The DMA engine ``cfg`` asks for: :class:`RegisteredHostDMA` with
    ``cfg.control_registers``, else :class:`HostDMA`."""
    return (RegisteredHostDMA if cfg.control_registers else HostDMA)(cfg)
