"""The TPU core: sequencer, weight memory and reader, and the datapath, joined."""

from amaranth.hdl import Module, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .activation_issuer import ActivationIssuer
from .datapath import Datapath
from .host_dma import DMA_REQUEST_LAYOUT, host_dma
from .sequencer import ProgramWrite, RunControl, Status, sequencer
from .weight_reader import WeightReader, WeightWrite

__all__ = ["Core"]


class Core(wiring.Component):
    """A programmable TPU core in the manner of TPU v1.

    The host loads a program (``program_write``) and weight tiles (``weight_write``),
    pulses ``control.start``, feeds the rows that READ_HOST takes on ``host_in`` and takes the
    rows WRITE_HOST sends on ``host_out``, and reads the ``status``. See
    :class:`~tpuer.hw.sequencer.Sequencer` for what each instruction does and waits for.

    ``memory_request`` hands the host DMA engine a transfer of the host's own (read rows of
    either memory out on ``host_out``, or write ``host_in`` rows into the Unified Buffer)
    while no program runs; the sequencer's requests go first.
    """

    def __init__(self, cfg):
        self._cfg = cfg
        self.host_row_layout = data.ArrayLayout(cfg.acc_shape, cfg.ub_lanes)
        super().__init__({
            "program_write": In(ProgramWrite(cfg)),
            "control": In(RunControl()),
            "weight_write": In(WeightWrite(cfg)),
            "status": Out(Status()),
            "host_in": In(stream.Signature(data.ArrayLayout(cfg.operand_shape, cfg.ub_lanes))),
            "host_out": Out(stream.Signature(self.host_row_layout)),
            "memory_request": In(stream.Signature(DMA_REQUEST_LAYOUT)),
        })

    @property
    def config(self):
        return self._cfg

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        m.submodules.sequencer = seq = sequencer(cfg)
        m.submodules.datapath = dp = Datapath(cfg)
        m.submodules.weight_reader = reader = WeightReader(cfg)
        m.submodules.host_dma = dma = host_dma(cfg)

        m.submodules.activation_issuer = issuer = ActivationIssuer(cfg)
        wiring.connect(m, seq.matmul, dp.matmul)
        m.d.comb += dp.matmul_pending.eq(seq.matmul_pending)
        wiring.connect(m, seq.activate_request, issuer.request)
        wiring.connect(m, issuer.activate, dp.activate)
        for name in ("host_write", "host_read"):
            wiring.connect(m, getattr(dma, name), getattr(dp, name))
        wiring.connect(m, dp.host_data, dma.host_data)
        # The DMA engine serves the sequencer first, the host when the sequencer claims
        # nothing (the host interface asks only while no program runs).
        from_seq = seq.dma_claim
        any_valid = seq.dma_request.valid | (self.memory_request.valid & ~from_seq)
        m.d.comb += [
            dma.request.valid.eq(any_valid),
            dma.request.payload.eq(Mux(from_seq, seq.dma_request.payload,
                                       self.memory_request.payload)),
            seq.dma_request.ready.eq(dma.request.ready),
            self.memory_request.ready.eq(dma.request.ready & ~from_seq),
        ]
        wiring.connect(m, dma.transfer, seq.transfer)
        wiring.connect(m, issuer.activation, seq.activation)
        wiring.connect(m, seq.weight_request, reader.request)
        wiring.connect(m, reader.weights, dp.weights)
        wiring.connect(m, wiring.flipped(self.host_in), dma.host_in)
        wiring.connect(m, dma.host_out, wiring.flipped(self.host_out))
        m.d.comb += [
            dp.params.eq(seq.params),
            dp.param_write.eq(seq.param_write),
            seq.weight_reader_busy.eq(reader.busy),
            seq.matmul_busy.eq(dp.matmul_busy),
            seq.acc_bank_busy.eq(dp.acc_bank_busy),
            seq.activate_busy.eq(dp.activate_busy | issuer.activation.busy),
            issuer.draining.eq(dp.activate_busy),
            seq.weight_stall.eq(dp.weight_stall),
            seq.vector_issued.eq(dp.vector_issued),
            dma.cancel.eq(seq.dma_cancel),
        ]
        wiring.connect(m, wiring.flipped(self.program_write), seq.program_write)
        wiring.connect(m, wiring.flipped(self.control), seq.control)
        wiring.connect(m, wiring.flipped(self.weight_write), reader.write)
        wiring.connect(m, seq.status, wiring.flipped(self.status))
        return m
