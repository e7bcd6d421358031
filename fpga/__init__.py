"""FPGA boards and builds (the FPGA issue fills this in)."""
