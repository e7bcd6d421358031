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

// Simulation model of the part of the ECP5's DP16KD that tpuer uses: a block RAM of 1024
// words of two 9-bit bytes (DATA_WIDTH 18 on both ports), written on port A (CEA and WEA,
// a byte enable each on ADA0 and ADA1, the address on ADA4-ADA13) and read on port B
// (CEB, the address on ADB4-ADB13), whose word read goes through the output register
// (REGMODE_B "OUTREG", enabled by OCEB) or straight out (REGMODE_B "NOREG"). Lattice's
// memory usage guide for the ECP5 (TN1264) describes the block; Yosys's ECP5 library has
// only a black box of it. Words start at 0 (INITVAL's default). A read of the word being
// written in the same cycle is undefined in the block, and gives X here. Other widths,
// writes on port B, chip-select decoding and the resets are not modelled: a parameter or
// input that asks for them stops the simulation.
module DP16KD (
    input DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8, DIA7, DIA6,
    input DIA5, DIA4, DIA3, DIA2, DIA1, DIA0,
    input ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4, ADA3, ADA2, ADA1,
    input ADA0,
    input CEA, OCEA, CLKA, WEA, RSTA, CSA2, CSA1, CSA0,
    output DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6,
    output DOA5, DOA4, DOA3, DOA2, DOA1, DOA0,
    input DIB17, DIB16, DIB15, DIB14, DIB13, DIB12, DIB11, DIB10, DIB9, DIB8, DIB7, DIB6,
    input DIB5, DIB4, DIB3, DIB2, DIB1, DIB0,
    input ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4, ADB3, ADB2, ADB1,
    input ADB0,
    input CEB, OCEB, CLKB, WEB, RSTB, CSB2, CSB1, CSB0,
    output DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6,
    output DOB5, DOB4, DOB3, DOB2, DOB1, DOB0
);
    parameter DATA_WIDTH_A = 18;
    parameter DATA_WIDTH_B = 18;
    parameter REGMODE_A = "NOREG";
    parameter REGMODE_B = "NOREG";
    parameter RESETMODE = "SYNC";
    parameter ASYNC_RESET_RELEASE = "SYNC";
    parameter CSDECODE_A = "0b000";
    parameter CSDECODE_B = "0b000";
    parameter WRITEMODE_A = "NORMAL";
    parameter WRITEMODE_B = "NORMAL";
    parameter GSR = "ENABLED";

    wire [17:0] dia = {DIA17, DIA16, DIA15, DIA14, DIA13, DIA12, DIA11, DIA10, DIA9, DIA8,
                       DIA7, DIA6, DIA5, DIA4, DIA3, DIA2, DIA1, DIA0};
    wire [9:0] write_addr = {ADA13, ADA12, ADA11, ADA10, ADA9, ADA8, ADA7, ADA6, ADA5, ADA4};
    wire [9:0] read_addr = {ADB13, ADB12, ADB11, ADB10, ADB9, ADB8, ADB7, ADB6, ADB5, ADB4};
    reg [8:0] low [0:1023];
    reg [8:0] high [0:1023];
    reg [17:0] read_word = 0, output_reg = 0;
    integer word;

    initial begin
        // The INITVAL parameters' default: every word 0 from configuration on.
        for (word = 0; word < 1024; word = word + 1) begin
            low[word] = 0;
            high[word] = 0;
        end
        if (DATA_WIDTH_A != 18 || DATA_WIDTH_B != 18 || REGMODE_A != "NOREG"
            || (REGMODE_B != "NOREG" && REGMODE_B != "OUTREG")
            || CSDECODE_A != "0b000" || CSDECODE_B != "0b000") begin
            $display("DP16KD model: only 18-bit ports, REGMODE_A NOREG and no chip select");
            $finish;
        end
    end

    wire writing = CEA && WEA;
    always @(posedge CLKA) begin
        if (writing && ADA0) low[write_addr] <= dia[8:0];
        if (writing && ADA1) high[write_addr] <= dia[17:9];
    end
    always @(posedge CLKB) begin
        if (WEB || RSTB || RSTA || {CSA2, CSA1, CSA0} != 0 || {CSB2, CSB1, CSB0} != 0
            || {ADB3, ADB2, ADB1, ADB0} != 0 || {ADA3, ADA2} != 0) begin
            $display("DP16KD model: port B writes, resets, chip selects not modelled");
            $finish;
        end
        if (CEB) begin
            if (writing && read_addr == write_addr)
                read_word <= 18'bx;
            else
                read_word <= {high[read_addr], low[read_addr]};
        end
        if (OCEB) output_reg <= read_word;
    end
    wire [17:0] dob = REGMODE_B == "OUTREG" ? output_reg : read_word;

    assign {DOB17, DOB16, DOB15, DOB14, DOB13, DOB12, DOB11, DOB10, DOB9, DOB8, DOB7, DOB6,
            DOB5, DOB4, DOB3, DOB2, DOB1, DOB0} = dob;
    assign {DOA17, DOA16, DOA15, DOA14, DOA13, DOA12, DOA11, DOA10, DOA9, DOA8, DOA7, DOA6,
            DOA5, DOA4, DOA3, DOA2, DOA1, DOA0} = 18'bx;
endmodule
