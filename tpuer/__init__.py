"""tpuer: a small, readable Tensor Processing Unit in Amaranth HDL.

Subpackages: ``tpuer.hw`` (RTL), ``tpuer.sim`` (golden models, simulator back ends),
``tpuer.tb`` (cocotb testbenches), ``tpuer.fpga`` (boards).
"""

from .config import Config, ConfigError
from .device import CycleBudgetError, Device, TPUError
from .quantize import Conv2D, Dense, QuantizedModel, quantize, quantize_mlp
from .tflite_model import TFLiteError, TFLiteModel, from_tflite

__all__ = ["Config", "ConfigError", "Device", "TPUError", "CycleBudgetError", "Dense", "Conv2D",
           "QuantizedModel", "quantize", "quantize_mlp", "TFLiteModel", "TFLiteError",
           "from_tflite"]
__version__ = "0.1.0"
