"""Amaranth RTL of the TPU: one block per module."""

from .pe import ProcessingElement
from .systolic_array import SharedDSPSystolicArray, SystolicArray
from .data_setup import DiagonalSkew
from .weight_fifo import WeightFIFO
from .matrix_unit import MatrixUnit
from .unified_buffer import UnifiedBuffer
from .accumulators import AccumulatorMemory
from .activation import ActivationUnit
from .datapath import Datapath
from .core import Core

__all__ = ["ProcessingElement", "SystolicArray", "DiagonalSkew", "WeightFIFO", "MatrixUnit",
           "UnifiedBuffer", "AccumulatorMemory", "ActivationUnit", "Datapath",
           "Core"]
