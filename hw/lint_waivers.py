"""The one list of Verilator warnings that the generated Verilog is allowed to raise.

``tpuer lint`` and the Verilator builds both use it. Each waiver says why the warning is
not a defect of the design.
"""

VERILATOR_WAIVERS = {
    "WIDTHEXPAND": "Amaranth emits signed arithmetic on operands of their natural widths and "
                   "relies on Verilog's implicit sign extension, which is what it means.",
    "WIDTHTRUNC": "Amaranth assigns wider intermediate results to narrower signals where the "
                  "truncation is the intended modulo arithmetic or a proven-narrow value.",
    "PROCASSINIT": "Amaranth gives every register its reset value as an initial value too, "
                   "so FPGA bitstreams start in the reset state.",
    "UNUSEDSIGNAL": "Amaranth names intermediate values of which only some bits are used "
                    "(the carry of a saturating add, the unused read port fields).",
    "CASEINCOMPLETE": "Amaranth assigns every signal its default before a case statement, "
                      "so a case that lists only some values (an FSM state, an opcode) "
                      "leaves the others at that default, as intended.",
    "DECLFILENAME": "The module is named `top` in a file of another name, by choice of the "
                    "build flow.",
}
