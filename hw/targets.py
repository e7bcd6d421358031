"""What the blocks ask of the platform they are elaborated for."""

__all__ = ["is_ecp5", "is_ice40", "is_ice40_ultraplus"]


def is_ice40(platform):
    """Elaborated for a Lattice iCE40 (slow logic, so fewer pipeline registers pay)."""
    from amaranth.vendor import LatticeICE40Platform
    return isinstance(platform, LatticeICE40Platform)


def is_ice40_ultraplus(platform):
    """Elaborated for an iCE40 UltraPlus, the iCE40 with DSPs (SB_MAC16) and SPRAM."""
    return is_ice40(platform) and platform.device.startswith("iCE40UP")


def is_ecp5(platform):
    """Elaborated for a Lattice ECP5 (hard multipliers: MULT18X18D)."""
    from amaranth.vendor import LatticePlatform
    return isinstance(platform, LatticePlatform) and platform.family == "ecp5"
