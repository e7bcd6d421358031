"""Cycle-level golden model of one processing element."""

__all__ = ["ProcessingElementModel"]


class ProcessingElementModel:
    """State and one-cycle step of :class:`tpuer.hw.ProcessingElement`."""

    def __init__(self, acc_width, multiply_latency=1):
        self.acc_width = acc_width
        self.active = self.shadow = 0
        self.act_out = self.switch_out = self.psum_out = 0
        # The product registers, oldest first: act * weight of 1 (and 2) cycles before.
        self.products = [0] * multiply_latency

    def step(self, act_in, switch_in, psum_in, weight_in, weight_load):
        """Apply one clock edge; afterwards the ``*_out`` attributes are the outputs."""
        total = psum_in + self.products[0]
        self.products = self.products[1:] + [act_in * self.active]
        half = 1 << (self.acc_width - 1)
        self.psum_out = (total + half) % (1 << self.acc_width) - half   # wraps, as in RTL
        self.act_out, self.switch_out = act_in, switch_in
        if switch_in:
            self.active = self.shadow
        if weight_load:
            self.shadow = weight_in
