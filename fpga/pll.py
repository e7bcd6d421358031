"""Phase-locked loops of the supported FPGA families: divider settings found by search
(within the limits of the vendors' data sheets) and the primitive instantiated."""

from dataclasses import dataclass

from amaranth.hdl import ClockDomain, ClockSignal, Instance, ResetSignal, Signal
from amaranth.lib.cdc import ResetSynchronizer

__all__ = ["PLLSetting", "ice40_pll", "ecp5_pll", "PLLError", "add_pll_domain"]


class PLLError(ValueError):
    """No divider setting gives the requested clock closely enough."""


@dataclass(frozen=True)
class PLLSetting:
    family: str
    input_mhz: float
    output_mhz: float
    params: dict


def ice40_pll(input_mhz, output_mhz, *, tolerance=0.01):
    """SB_PLL40 settings (simple feedback): ``f_out = f_in (DIVF + 1) / ((DIVR + 1) 2**DIVQ)``
    with the phase detector at 10..133 MHz and the VCO at 533..1066 MHz."""
    best = None
    for divr in range(16):
        pfd = input_mhz / (divr + 1)
        if not 10 <= pfd <= 133:
            continue
        for divf in range(128):
            vco = pfd * (divf + 1)
            if not 533 <= vco <= 1066:
                continue
            for divq in range(1, 7):
                out = vco / 2 ** divq
                error = abs(out - output_mhz)
                if best is None or error < best[0]:
                    best = (error, divr, divf, divq, pfd, out)
    if best is None or best[0] > tolerance * output_mhz:
        raise PLLError(f"no iCE40 PLL setting makes {output_mhz} MHz from {input_mhz} MHz")
    _, divr, divf, divq, pfd, out = best
    filter_range = next(r for r, top in enumerate((17, 26, 44, 66, 101, 133), start=1)
                        if pfd < top)
    return PLLSetting("ice40", input_mhz, out, {"DIVR": divr, "DIVF": divf, "DIVQ": divq,
                                                "FILTER_RANGE": filter_range})


def ecp5_pll(input_mhz, output_mhz, *, tolerance=0.01):
    """EHXPLLL settings: ``f_out = f_in CLKFB_DIV / CLKI_DIV`` with the VCO
    (``f_out CLKOP_DIV``) at 400..800 MHz."""
    best = None
    for clki in range(1, 129):
        pfd = input_mhz / clki
        if not 3.125 <= pfd <= 400:
            continue
        for clkfb in range(1, 81):
            out = pfd * clkfb
            for clkop in range(1, 129):
                vco = out * clkop
                if not 400 <= vco <= 800:
                    continue
                error = abs(out - output_mhz)
                if best is None or error < best[0] or (error == best[0] and
                                                        abs(vco - 600) < abs(best[4] - 600)):
                    best = (error, clki, clkfb, clkop, vco, out)
    if best is None or best[0] > tolerance * output_mhz:
        raise PLLError(f"no ECP5 PLL setting makes {output_mhz} MHz from {input_mhz} MHz")
    _, clki, clkfb, clkop, vco, out = best
    return PLLSetting("ecp5", input_mhz, out, {"CLKI_DIV": clki, "CLKFB_DIV": clkfb,
                                               "CLKOP_DIV": clkop,
                                               "CLKOP_CPHASE": clkop // 2 - 1})


def add_pll_domain(m, setting, clock_pin, *, domain="sync", global_reset=False):
    """Make clock domain ``domain`` from ``clock_pin`` through the PLL of ``setting``; it
    stays in reset until the PLL locks. Returns the domain.

    With ``global_reset`` (ECP5 only) the synchronised reset reaches its flip-flops over a
    primary clock network, through a DCCA, instead of the general routing: a net with
    thousands of loads otherwise crowds the routing around every block it reaches.
    """
    if global_reset and setting.family != "ecp5":
        raise ValueError("a reset on a clock network (global_reset) is made for the ECP5 "
                         "only")
    cd = ClockDomain(domain)
    m.domains += cd
    locked = Signal()
    p = setting.params
    if setting.family == "ice40":
        m.submodules.pll = Instance(
            "SB_PLL40_PAD",
            p_FEEDBACK_PATH="SIMPLE", p_DIVR=p["DIVR"], p_DIVF=p["DIVF"], p_DIVQ=p["DIVQ"],
            p_FILTER_RANGE=p["FILTER_RANGE"],
            i_PACKAGEPIN=clock_pin, i_RESETB=1, i_BYPASS=0,
            o_PLLOUTGLOBAL=ClockSignal(domain), o_LOCK=locked)
    else:
        m.submodules.pll = Instance(
            "EHXPLLL",
            a_FREQUENCY_PIN_CLKI=str(setting.input_mhz),
            a_FREQUENCY_PIN_CLKOP=f"{setting.output_mhz:.3f}",
            a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1",
            a_MFG_GMCREF_SEL="2",
            p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
            p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA",
            p_CLKI_DIV=p["CLKI_DIV"], p_CLKOP_ENABLE="ENABLED", p_CLKOP_DIV=p["CLKOP_DIV"],
            p_CLKOP_CPHASE=p["CLKOP_CPHASE"], p_CLKOP_FPHASE=0, p_FEEDBK_PATH="CLKOP",
            p_CLKFB_DIV=p["CLKFB_DIV"],
            i_RST=0, i_STDBY=0, i_CLKI=clock_pin, i_CLKFB=ClockSignal(domain),
            i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1,
            i_PLLWAKESYNC=0, i_ENCLKOP=0,
            o_CLKOP=ClockSignal(domain), o_LOCK=locked)
    # In reset until the PLL locks; released in step with the new clock.
    if global_reset:
        # The synchroniser in a domain of its own on the same clock, whose reset (the
        # synchronised one) the DCCA puts on a clock network as the domain's reset.
        source = ClockDomain(f"{domain}_reset_source")
        m.domains += source
        m.d.comb += ClockSignal(source.name).eq(ClockSignal(domain))
        m.submodules.reset_sync = ResetSynchronizer(~locked, domain=source.name)
        m.submodules.reset_buffer = Instance("DCCA", i_CLKI=ResetSignal(source.name), i_CE=1,
                                             o_CLKO=ResetSignal(domain))
    else:
        m.submodules.reset_sync = ResetSynchronizer(~locked, domain=domain)
    return cd
