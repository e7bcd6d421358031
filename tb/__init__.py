"""cocotb and amaranth.sim testbenches of the TPU blocks, checked against the golden models."""
