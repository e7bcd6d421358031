// Simulation model of the part of the ECP5's MULT18X18D that tpuer uses: an 18 x 18-bit
// multiplier, signed or unsigned per operand, whose A and B inputs, pipeline and output
// may each be registered on CLK0 (enabled by CE0, cleared by RST0 at the clock edge, as
// RESETMODE "SYNC"). Lattice's sysDSP usage guide (TN1267) describes the block; Yosys's
// ECP5 library has no model of it. Other clocks, the shift inputs (SOURCEA, SOURCEB), the
// C input and cascading are not modelled: a parameter that asks for them stops the
// simulation.
module MULT18X18D (
    input A0, A1, A2, A3, A4, A5, A6, A7, A8, A9, A10, A11, A12, A13, A14, A15, A16, A17,
    input B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12, B13, B14, B15, B16, B17,
    input SIGNEDA, SIGNEDB, SOURCEA, SOURCEB,
    input CLK0, CE0, RST0,
    output P0, P1, P2, P3, P4, P5, P6, P7, P8, P9, P10, P11, P12, P13, P14, P15, P16, P17,
    output P18, P19, P20, P21, P22, P23, P24, P25, P26, P27, P28, P29, P30, P31, P32, P33,
    output P34, P35
);
    parameter REG_INPUTA_CLK = "NONE";
    parameter REG_INPUTA_CE = "CE0";
    parameter REG_INPUTA_RST = "RST0";
    parameter REG_INPUTB_CLK = "NONE";
    parameter REG_INPUTB_CE = "CE0";
    parameter REG_INPUTB_RST = "RST0";
    parameter REG_INPUTC_CLK = "NONE";
    parameter REG_PIPELINE_CLK = "NONE";
    parameter REG_PIPELINE_CE = "CE0";
    parameter REG_PIPELINE_RST = "RST0";
    parameter REG_OUTPUT_CLK = "NONE";
    parameter REG_OUTPUT_CE = "CE0";
    parameter REG_OUTPUT_RST = "RST0";
    parameter CLK0_DIV = "ENABLED";
    parameter CLK1_DIV = "ENABLED";
    parameter CLK2_DIV = "ENABLED";
    parameter CLK3_DIV = "ENABLED";
    parameter HIGHSPEED_CLK = "NONE";
    parameter GSR = "ENABLED";
    parameter CAS_MATCH_REG = "FALSE";
    parameter SOURCEB_MODE = "B_SHIFT";
    parameter MULT_BYPASS = "DISABLED";
    parameter RESETMODE = "SYNC";

    wire [17:0] a = {A17, A16, A15, A14, A13, A12, A11, A10, A9, A8, A7, A6, A5, A4, A3, A2,
                     A1, A0};
    wire [17:0] b = {B17, B16, B15, B14, B13, B12, B11, B10, B9, B8, B7, B6, B5, B4, B3, B2,
                     B1, B0};
    reg [17:0] a_reg = 0, b_reg = 0;
    reg sign_a_reg = 0, sign_b_reg = 0;
    reg [35:0] pipeline_reg = 0, output_reg = 0;

    initial begin
        if (RESETMODE != "SYNC" || MULT_BYPASS != "DISABLED" || REG_INPUTC_CLK != "NONE") begin
            $display("MULT18X18D model: RESETMODE, MULT_BYPASS or REG_INPUTC_CLK not modelled");
            $finish;
        end
        if ((REG_INPUTA_CLK != "NONE" && (REG_INPUTA_CLK != "CLK0" || REG_INPUTA_CE != "CE0"
                                         || REG_INPUTA_RST != "RST0"))
            || (REG_INPUTB_CLK != "NONE" && (REG_INPUTB_CLK != "CLK0"
                                             || REG_INPUTB_CE != "CE0"
                                             || REG_INPUTB_RST != "RST0"))
            || (REG_PIPELINE_CLK != "NONE" && (REG_PIPELINE_CLK != "CLK0"
                                               || REG_PIPELINE_CE != "CE0"
                                               || REG_PIPELINE_RST != "RST0"))
            || (REG_OUTPUT_CLK != "NONE" && (REG_OUTPUT_CLK != "CLK0"
                                             || REG_OUTPUT_CE != "CE0"
                                             || REG_OUTPUT_RST != "RST0"))) begin
            $display("MULT18X18D model: only registers on CLK0, CE0 and RST0 are modelled");
            $finish;
        end
    end

    always @(posedge CLK0) begin
        if (RST0) begin
            a_reg <= 0; sign_a_reg <= 0;
        end else if (CE0) begin
            a_reg <= a; sign_a_reg <= SIGNEDA;
        end
        if (RST0) begin
            b_reg <= 0; sign_b_reg <= 0;
        end else if (CE0) begin
            b_reg <= b; sign_b_reg <= SIGNEDB;
        end
    end

    wire [17:0] a_in = REG_INPUTA_CLK == "NONE" ? a : a_reg;
    wire [17:0] b_in = REG_INPUTB_CLK == "NONE" ? b : b_reg;
    wire sign_a = REG_INPUTA_CLK == "NONE" ? SIGNEDA : sign_a_reg;
    wire sign_b = REG_INPUTB_CLK == "NONE" ? SIGNEDB : sign_b_reg;
    // Each operand widened to 36 bits by its sign or by zeros; the low 36 bits of the
    // product of the widened operands are the product of the operands.
    wire [35:0] a_wide = {{18{sign_a & a_in[17]}}, a_in};
    wire [35:0] b_wide = {{18{sign_b & b_in[17]}}, b_in};
    wire [35:0] product = a_wide * b_wide;

    always @(posedge CLK0) begin
        if (RST0) pipeline_reg <= 0; else if (CE0) pipeline_reg <= product;
    end
    wire [35:0] piped = REG_PIPELINE_CLK == "NONE" ? product : pipeline_reg;
    always @(posedge CLK0) begin
        if (RST0) output_reg <= 0; else if (CE0) output_reg <= piped;
    end
    wire [35:0] p = REG_OUTPUT_CLK == "NONE" ? piped : output_reg;

    assign {P35, P34, P33, P32, P31, P30, P29, P28, P27, P26, P25, P24, P23, P22, P21, P20,
            P19, P18, P17, P16, P15, P14, P13, P12, P11, P10, P9, P8, P7, P6, P5, P4, P3,
            P2, P1, P0} = p;
endmodule
