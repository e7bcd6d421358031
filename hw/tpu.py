"""The whole TPU behind its host interface: one pair of 32-bit word streams."""

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..protocol import WORD_BITS, check_lane_width
from .core import Core
from .host_interface import HostInterface

__all__ = ["TPU"]


class TPU(wiring.Component):
    """:class:`Core` and :class:`HostInterface` joined: commands in on ``cmd``, replies out
    on ``rsp`` (:mod:`tpuer.protocol`). A UART, or any other link, wraps exactly these."""

    def __init__(self, cfg):
        check_lane_width(cfg)
        self._cfg = cfg
        super().__init__({"cmd": In(stream.Signature(WORD_BITS)),
                          "rsp": Out(stream.Signature(WORD_BITS))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.host = host = HostInterface(self._cfg)
        m.submodules.core = core = Core(self._cfg)
        wiring.connect(m, wiring.flipped(self.cmd), host.cmd)
        wiring.connect(m, host.rsp, wiring.flipped(self.rsp))
        wiring.connect(m, host.host_in, core.host_in)
        wiring.connect(m, core.host_out, host.host_out)
        wiring.connect(m, host.memory_request, core.memory_request)
        for port in ("program_write", "control", "weight_write"):
            wiring.connect(m, getattr(host, port), getattr(core, port))
        wiring.connect(m, core.status, host.status)
        return m
