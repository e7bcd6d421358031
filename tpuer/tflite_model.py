"""TFLite int8 models: read with the ``tflite`` package (the flatbuffer schema's own Python
classes), checked, and run bit-exactly as LiteRT's reference kernels run them.

:func:`from_tflite` returns a :class:`TFLiteModel`. Its matrix operators
(FULLY_CONNECTED, CONV_2D, DEPTHWISE_CONV_2D) are int8 matrix products, which
``tpuer.Device.run`` computes on the TPU together with the requantisation that ends them
(the activation unit computes it bit for bit as the kernel does: see
:attr:`_MatrixOperation.layer`), consecutive FULLY_CONNECTED operators as one program
whose activations stay in the Unified Buffer. Everything else is computed on the host by
:mod:`tpuer.tflite_kernels`.
"""

import os
from dataclasses import dataclass

import numpy as np

from . import tflite_kernels as kernels
from .isa import MAX_LEFT_SHIFT, Rounding
from .quantize import QuantizedLayer, QuantizedModel
from .tflite_verifier import FlatbufferError, verify

__all__ = ["TFLiteError", "TFLiteModel", "TensorInfo", "from_tflite", "litert_output",
           "SUPPORTED_OPERATORS"]

ACTIVATIONS = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH", 5: "SIGN_BIT"}
PADDINGS = {0: "SAME", 1: "VALID"}


class TFLiteError(ValueError):
    """A TFLite model tpuer cannot read or run; the message says which part and why."""


@dataclass(frozen=True, eq=False)
class TensorInfo:
    """A tensor of the model: ``shape`` as the file gives it (its first axis the batch),
    ``dtype``, its quantisation (``scale`` float32 and ``zero_point`` per channel along
    ``axis``, or ``None``), and ``data`` for a constant."""
    index: int
    name: str
    shape: tuple
    dtype: np.dtype
    scale: np.ndarray | None
    zero_point: np.ndarray | None
    axis: int
    data: np.ndarray | None

    @property
    def quantization(self):
        """``(scale, zero_point)`` of a per-tensor quantised tensor (scale a float32)."""
        return np.float32(self.scale[0]), int(self.zero_point[0])


_DTYPES = {0: np.float32, 2: np.int32, 3: np.uint8, 4: np.int64, 7: np.int16, 9: np.int8,
           10: np.float64}


class Operation:
    """One operator of the model: ``index`` in the file, ``name`` (TFLite's), tensor
    indices ``inputs`` and ``outputs``. ``on_tpu`` says whether its product runs on the
    TPU."""

    on_tpu = False

    def __init__(self, model, index, name, inputs, outputs, options):
        self.index, self.name = index, name
        self.inputs, self.outputs = tuple(inputs), tuple(outputs)
        self.options = options
        self._check(model)
        self._prepare()

    def where(self):
        return f"operator {self.index} ({self.name})"

    def _fail(self, problem):
        raise TFLiteError(f"{self.where()}: {problem}")

    def _output_tensor(self, model, *, dtypes=(np.int8,)):
        """The operator's output, checked as :meth:`_tensor` checks an input."""
        return self._checked(model.tensors[self.outputs[0]], dtypes, constant=False)

    def _tensor(self, model, position, *, dtypes=(np.int8,), constant=None):
        """Input ``position``, refused unless of one of ``dtypes``, a constant in the file
        (``constant`` True) or not (False), and quantised when int8."""
        if position >= len(self.inputs) or self.inputs[position] < 0:
            self._fail(f"input {position} is missing")
        return self._checked(model.tensors[self.inputs[position]], dtypes, constant)

    def _checked(self, tensor, dtypes, constant):
        if tensor.dtype is None or np.dtype(tensor.dtype) not in [np.dtype(d) for d in dtypes]:
            kind = "a type tpuer does not read" if tensor.dtype is None else \
                f"type {np.dtype(tensor.dtype).name}"
            self._fail(f"tensor {tensor.name!r} has {kind}; tpuer runs "
                       f"{' or '.join(np.dtype(d).name for d in dtypes)} here")
        if constant is True and tensor.data is None:
            self._fail(f"tensor {tensor.name!r} must be a constant in the file")
        if constant is False and tensor.data is not None:
            self._fail(f"tensor {tensor.name!r} is a constant, not an activation")
        if np.dtype(tensor.dtype) == np.int8 and tensor.scale is None:
            self._fail(f"tensor {tensor.name!r} is int8 without quantisation parameters")
        return tensor

    def _activation(self):
        """The fused activation (kept as ``activation``), refused unless a clamp."""
        activation = ACTIVATIONS.get(self.options.get("activation", 0), "UNKNOWN")
        if activation not in ("NONE", "RELU", "RELU6", "RELU_N1_TO_1"):
            self._fail(f"the fused activation {activation} is not supported (NONE, RELU, "
                       f"RELU6 and RELU_N1_TO_1 are)")
        self.activation = activation
        return activation

    def _check(self, model):
        """Refuse what this operator cannot compute exactly (a :class:`TFLiteError`)."""

    def _prepare(self):
        """What the operator computes once, after :meth:`_check`."""

    def run(self, model, values, matmul):
        """Compute the outputs into ``values`` (tensor index -> array) from the inputs."""
        raise NotImplementedError

    def macs(self, model, batch=1):
        """Multiply-accumulates of the operator's product for ``batch`` samples (0 off the
        TPU)."""
        return 0


class _MatrixOperation(Operation):
    """An operator whose core is an int8 product, ``rows @ weights``; the requantisation
    after it follows the kernel's own arithmetic."""

    on_tpu = True
    #: The rank of the operator's filter tensor.
    FILTER_RANK = 4

    def _check(self, model):
        self._input = self._tensor(model, 0, constant=False)
        self._filter = self._tensor(model, 1, constant=True)
        if len(self._filter.shape) != self.FILTER_RANK or 0 in self._filter.shape:
            self._fail(f"its filter {self._filter.name!r} has shape {self._filter.shape}, not "
                       f"{self.FILTER_RANK} non-zero sizes")
        self._output = self._output_tensor(model)
        self._bias = None
        if len(self.inputs) > 2 and self.inputs[2] >= 0:
            self._bias = self._tensor(model, 2, dtypes=(np.int32,), constant=True)
        self.bounds = kernels.activation_range(self._activation(),
                                               *self._output.quantization)
        for tensor in (self._input, self._output):
            if len(tensor.scale) != 1:
                self._fail(f"tensor {tensor.name!r} is quantised per channel; only weights "
                           f"may be")
        if np.any(self._filter.zero_point):
            self._fail(f"its int8 weights {self._filter.name!r} must be quantised "
                       f"symmetrically (zero point 0, as LiteRT's kernels require), not with "
                       f"zero point {int(self._filter.zero_point[np.flatnonzero(self._filter.zero_point)[0]])}")
        if self._bias is not None and self._bias.data.size != self._channels():
            self._fail(f"its bias has {self._bias.data.size} values for "
                       f"{self._channels()} output channels")

    def _prepare(self):
        """:attr:`layer`: the operator as a :class:`~tpuer.quantize.QuantizedLayer` of the
        TPU, its requantisation the activation unit's and bit for bit the kernel's; or
        ``None``, when :attr:`host_requantisation` says why the host requantises (the
        product still runs on the TPU).

        The input zero point is folded into the bias (``bias - z_in * sum(w)``: the padding
        holds the zero point, so every window position takes it). It holds when the
        weights' zero points are 0, every accumulator the input can make fits int32 (the
        kernel's own wraps, the TPU's saturates) and the requantisation fits the unit
        (:meth:`_fixed_point`)."""
        self.layer, self.host_requantisation = None, None
        weights = self._weights.astype(np.int64)
        (input_scale, input_zero), (output_scale, output_zero) = (
            self._input.quantization, self._output.quantization)
        bias = np.zeros(weights.shape[1], np.int64) if self._bias is None else \
            self._bias.data.astype(np.int64)
        bias = bias - input_zero * weights.sum(axis=0)
        inputs = np.array([kernels.INT8_MIN - input_zero, kernels.INT8_MAX - input_zero])
        low = bias + np.minimum(inputs[0] * weights, inputs[1] * weights).sum(axis=0)
        high = bias + np.maximum(inputs[0] * weights, inputs[1] * weights).sum(axis=0)
        if low.min() < -(1 << 31) or high.max() >= 1 << 31:
            self.host_requantisation = "its accumulators may leave int32"
            return
        fixed = self._fixed_point(low, high)
        if isinstance(fixed, str):
            self.host_requantisation = fixed
            return
        multiplier, shift, rounding = fixed
        self.layer = QuantizedLayer(
            kind="dense", weights=self._weights, bias=bias, multiplier=multiplier,
            shift=shift, input_scale=float(input_scale), input_zero_point=input_zero,
            output_scale=float(output_scale), output_zero_point=output_zero, relu=False,
            input_shape=(len(weights),), output_shape=(weights.shape[1],),
            rounding=rounding, clamp=self.bounds)

    def rows(self, x):
        """The rows of the operator's product for input ``x``, and the shape its output
        rows take."""
        raise NotImplementedError

    def _channels(self):
        return self._filter.shape[0]

    def _filter_scales(self):
        scales = self._filter.scale.astype(np.float32)
        if len(scales) == 1:
            return np.repeat(scales, self._channels())
        if len(scales) != self._channels():
            self._fail(f"its weights have {len(scales)} scales for {self._channels()} "
                       f"output channels")
        return scales

    def _filter_zero_points(self):
        zeros = np.asarray(self._filter.zero_point, np.int64)
        return np.repeat(zeros, self._channels()) if len(zeros) == 1 else zeros

    def _effective_scales(self):
        """``s_in * s_w / s_out`` per output channel, in float64 from the float32 scales,
        as the kernels' Prepare computes it."""
        input_scale, _ = self._input.quantization
        output_scale, _ = self._output.quantization
        scales = np.array([float(input_scale) * float(scale) / float(output_scale)
                           for scale in self._filter_scales()])
        if scales.max() >= MAX_EFFECTIVE_SCALE:
            self._fail(f"its requantisation scale s_in * s_w / s_out reaches "
                       f"{scales.max():.3g}; tpuer takes scales below "
                       f"{MAX_EFFECTIVE_SCALE:g} (a converter's are about 1 or less)")
        return scales

    def _product(self, rows, weights, matmul):
        """``(rows - z_in) @ (weights - z_w) + bias``, int64, the product on ``matmul``."""
        _, input_zero = self._input.quantization
        bias = None if self._bias is None else self._bias.data
        return kernels.integer_product(rows, weights, input_zero_point=input_zero,
                                       weight_zero_point=self._filter_zero_points(),
                                       bias=bias, matmul=matmul)


class FullyConnected(_MatrixOperation):
    """FULLY_CONNECTED: ``x (.., K) @ W.T``; requantised in float64 as its reference kernel
    does (``round(acc * s_in * s_w / s_out)``)."""

    FILTER_RANK = 2

    def _check(self, model):
        super()._check(model)
        if self.options.get("weights_format", 0) != 0:
            self._fail("shuffled weights are not supported")
        self._weights = self._filter.data.reshape(self._filter.shape).T.copy()   # (K, N)
        self._scales = self._effective_scales()

    def _fixed_point(self, low, high):
        """Single rounding with each channel's :func:`~tpuer.tflite_kernels.single_rounding_pair`,
        where every channel has one."""
        _, output_zero = self._output.quantization
        pairs = [kernels.single_rounding_pair(lo, hi, scale, output_zero, self.bounds)
                 for lo, hi, scale in zip(low, high, self._scales)]
        if any(pair is None for pair in pairs):
            return "single rounding differs from its float64 requantisation"
        return (np.array([m for m, _ in pairs], np.int64),
                np.array([shift for _, shift in pairs], np.int64), Rounding.SINGLE)

    def rows(self, x):
        k = self._weights.shape[0]
        if x.size % (len(x) * k):
            self._fail(f"its input of shape {x.shape} does not split into rows of {k}")
        n = self._weights.shape[1]
        shape = (*x.shape[:-1], n) if self.options.get("keep_num_dims") else (-1, n)
        return x.reshape(-1, k), shape

    def run(self, model, values, matmul):
        rows, shape = self.rows(values[self.inputs[0]])
        acc = self._product(rows, self._weights, matmul)
        _, output_zero = self._output.quantization
        y = kernels.requantize_float(acc, self._scales, output_zero, self.bounds)
        values[self.outputs[0]] = y.reshape(shape)

    def macs(self, model, batch=1):
        rows = int(np.prod(self._input.shape)) // self._weights.shape[0]
        return batch * rows * self._weights.size


class _Convolution(_MatrixOperation):
    """CONV_2D and DEPTHWISE_CONV_2D: windows of the input (im2col, the padding holding the
    input zero point) times the filters; requantised by TFLite's fixed-point multiplier
    and two roundings."""

    def _check(self, model):
        if len(self.inputs) < 3 or self.inputs[2] < 0:
            self._fail("its bias is missing (LiteRT's int8 convolutions need one)")
        super()._check(model)
        if len(self._input.shape) != 4:
            self._fail(f"its input has shape {self._input.shape}, not (N, H, W, C)")
        _check_window_options(self, ("stride_h", "stride_w", "dilation_h", "dilation_w"))
        pairs = [kernels.tflite_multiplier(scale) for scale in self._effective_scales()]
        self._multipliers = np.array([m for m, _ in pairs], np.int64)
        self._exponents = np.array([e for _, e in pairs], np.int64)

    def _geometry(self, height, width):
        kernel = self._filter.shape[1:3]
        o = self.options
        stride, dilation = (o["stride_h"], o["stride_w"]), (o["dilation_h"], o["dilation_w"])
        before, out = kernels.window_geometry((height, width), kernel, stride, dilation,
                                              PADDINGS[o["padding"]])
        return kernel, stride, dilation, before, out

    def _windows(self, x):
        _, input_zero = self._input.quantization
        kernel, stride, dilation, before, out = self._geometry(*x.shape[1:3])
        return kernels.patches(x, kernel, stride, dilation, before, out, input_zero), out

    def _fixed_point(self, low, high):
        """The kernel's own double rounding (``MultiplyByQuantizedMultiplier``), where its
        left shifts fit the unit's."""
        if self._exponents.max() > MAX_LEFT_SHIFT:
            return (f"a scale of 2**{self._exponents.max()} or more needs a left shift "
                    f"beyond the activation unit's {MAX_LEFT_SHIFT} places")
        return self._multipliers, -self._exponents, Rounding.DOUBLE

    def rows(self, x):
        windows, (oh, ow) = self._windows(x)
        return windows.reshape(len(x) * oh * ow, -1), (len(x), oh, ow, -1)

    def run(self, model, values, matmul):
        rows, shape = self.rows(values[self.inputs[0]])
        y = self._requantize(self._product(rows, self._weights, matmul))
        values[self.outputs[0]] = y.reshape(shape)

    def macs(self, model, batch=1):
        """The useful products: ``_useful`` per output position."""
        _, _, _, _, (oh, ow) = self._geometry(*self._input.shape[1:3])
        return batch * oh * ow * self._useful

    def _requantize(self, acc):
        _, output_zero = self._output.quantization
        return kernels.requantize_double(acc, self._multipliers, self._exponents, output_zero,
                                         self.bounds)


class Conv2D(_Convolution):
    """CONV_2D: filters (O, KH, KW, C)."""

    def _check(self, model):
        super()._check(model)
        out_channels, kh, kw, channels = self._filter.shape
        if self._input.shape[3] != channels:
            self._fail(f"its filters take {channels} channels, its input has "
                       f"{self._input.shape[3]}")
        self._weights = self._filter.data.reshape(self._filter.shape).reshape(
            out_channels, -1).T.copy()                                       # (KH KW C, O)
        self._useful = self._weights.size


class DepthwiseConv2D(_Convolution):
    """DEPTHWISE_CONV_2D: filters (1, KH, KW, C * depth_multiplier); output channel
    ``c * m + j`` sees input channel ``c`` only. On the TPU a block-diagonal product:
    every channel's window against the filters of its own output channels."""

    def _channels(self):
        return self._filter.shape[3]

    def _check(self, model):
        super()._check(model)
        _, kh, kw, out_channels = self._filter.shape
        channels = self._input.shape[3]
        multiplier = self.options["depth_multiplier"] or out_channels // max(channels, 1)
        if channels < 1 or multiplier < 1 or channels * multiplier != out_channels:
            self._fail(f"{out_channels} output channels are not {channels} input channels "
                       f"times the depth multiplier {multiplier}")
        filters = self._filter.data.reshape(self._filter.shape)[0]            # (KH, KW, OC)
        weights = np.zeros((kh, kw, channels, out_channels), np.int8)
        for oc in range(out_channels):
            weights[:, :, oc // multiplier, oc] = filters[:, :, oc]
        self._weights = weights.reshape(-1, out_channels)
        self._useful = kh * kw * out_channels


def _check_size(operation, elements):
    """Refuse a tensor of more than :data:`MAX_TENSOR_ELEMENTS` elements before it is
    made."""
    if elements > MAX_TENSOR_ELEMENTS:
        operation._fail(f"it would make a tensor of {elements:,} elements, more than "
                        f"{MAX_TENSOR_ELEMENTS:,}")


def _check_window_options(operation, names):
    """Refuse a window's sizes, strides or dilations below 1 or above 32,767 (LiteRT's
    kernels keep them in int16), or an unknown padding."""
    for name in names:
        value = operation.options.get(name)
        if value is None or not 1 <= value <= 32767:
            operation._fail(f"its option {name} is {value}; it must be 1 to 32,767")
    if operation.options.get("padding") not in PADDINGS:
        operation._fail(f"its padding {operation.options.get('padding')} is not SAME (0) or "
                        f"VALID (1)")


class _Pool(Operation):
    def _check(self, model):
        self._input = self._tensor(model, 0, constant=False)
        self._output = self._output_tensor(model)
        if len(self._input.shape) != 4:
            self._fail(f"its input has shape {self._input.shape}, not (N, H, W, C)")
        _check_window_options(self, ("filter_h", "filter_w", "stride_h", "stride_w"))
        if self._input.quantization != self._output.quantization:
            self._fail("its input and output are quantised differently")
        self.bounds = kernels.activation_range(self._activation(),
                                               *self._output.quantization)

    def _arguments(self):
        o = self.options
        return ((o["filter_h"], o["filter_w"]), (o["stride_h"], o["stride_w"]),
                PADDINGS[o["padding"]], self.bounds)


class MaxPool2D(_Pool):
    def run(self, model, values, matmul):
        values[self.outputs[0]] = kernels.max_pool(values[self.inputs[0]], *self._arguments())


class AveragePool2D(_Pool):
    def run(self, model, values, matmul):
        values[self.outputs[0]] = kernels.average_pool(values[self.inputs[0]],
                                                       *self._arguments())


class Mean(Operation):
    """MEAN over constant axes (global average pooling)."""

    def _check(self, model):
        self._input = self._tensor(model, 0, constant=False)
        self._output = self._output_tensor(model)
        axes = self._tensor(model, 1, dtypes=(np.int32,), constant=True).data
        rank = len(self._input.shape)
        if any(not -rank <= int(a) < rank for a in np.ravel(axes)):
            self._fail(f"its axes {np.ravel(axes).tolist()} are not all axes of a rank-{rank} "
                       f"input")
        self._axes = sorted({int(a) % rank for a in np.ravel(axes)})
        if 0 in self._axes:
            self._fail("it averages over the batch")

    def run(self, model, values, matmul):
        (in_scale, in_zero), (out_scale, out_zero) = (self._input.quantization,
                                                      self._output.quantization)
        values[self.outputs[0]] = kernels.mean(
            values[self.inputs[0]], self._axes, bool(self.options.get("keep_dims")), in_zero,
            out_zero, float(in_scale) / float(out_scale))


class Add(Operation):
    def _check(self, model):
        self._a = self._tensor(model, 0)
        self._b = self._tensor(model, 1)
        self._output = self._output_tensor(model)
        self.bounds = kernels.activation_range(self._activation(),
                                               *self._output.quantization)

    def run(self, model, values, matmul):
        a, b = (values[i] if model.tensors[i].data is None else model.constant(i)
                for i in self.inputs[:2])
        values[self.outputs[0]] = kernels.add(a, b, self._a.quantization, self._b.quantization,
                                              self._output.quantization, self.bounds)


class Softmax(Operation):
    def _check(self, model):
        self._input = self._tensor(model, 0, constant=False)
        output = self._output_tensor(model)
        scale, zero = output.quantization
        if zero != -128 or abs(float(scale) - 1 / 256) > 0.001 / 256:
            self._fail(f"its output is quantised with scale {scale} and zero point {zero}; "
                       f"an int8 SOFTMAX needs 1/256 and -128")

    def run(self, model, values, matmul):
        scale, _ = self._input.quantization
        values[self.outputs[0]] = kernels.softmax(values[self.inputs[0]],
                                                  self.options.get("beta", 1.0), scale)


class Quantize(Operation):
    """QUANTIZE from float32 (a model's float input)."""

    def _check(self, model):
        self._tensor(model, 0, dtypes=(np.float32,), constant=False)
        self._output = self._output_tensor(model)

    def run(self, model, values, matmul):
        values[self.outputs[0]] = kernels.quantize(values[self.inputs[0]],
                                                   *self._output.quantization)


class Dequantize(Operation):
    """DEQUANTIZE to float32 (a model's float output)."""

    def _check(self, model):
        self._input = self._tensor(model, 0, constant=False)
        self._output_tensor(model, dtypes=(np.float32,))

    def run(self, model, values, matmul):
        values[self.outputs[0]] = kernels.dequantize(values[self.inputs[0]],
                                                     *self._input.quantization)


class Pad(Operation):
    """PAD (and PADV2) with constant paddings; the value is the zero point (or PADV2's)."""

    def _check(self, model):
        self._input = self._tensor(model, 0, constant=False)
        self._output = self._output_tensor(model)
        paddings = self._tensor(model, 1, dtypes=(np.int32, np.int64), constant=True).data
        self._paddings = np.asarray(paddings).reshape(-1, 2)
        if self._paddings.shape[0] != len(self._input.shape) or np.any(self._paddings[0]):
            self._fail("it must pad every axis but the batch, given as (rank, 2) paddings")
        if np.any(self._paddings < 0):
            self._fail("negative paddings are not supported")
        _check_size(self, int(np.prod([size + int(pad.sum()) for size, pad in
                                       zip(self._input.shape, self._paddings)], dtype=object)))
        _, self._value = self._output.quantization
        if len(self.inputs) > 2 and self.inputs[2] >= 0:
            value = self._tensor(model, 2, constant=True)
            if value.data.size != 1 or value.quantization != self._output.quantization:
                self._fail("its constant value must be one value quantised as its output")
            self._value = int(value.data.reshape(-1)[0])

    def run(self, model, values, matmul):
        values[self.outputs[0]] = kernels.pad(values[self.inputs[0]], self._paddings,
                                              self._value)


class _BlockOperation(Operation):
    """SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND on (N, H, W, C), with constant block shape
    and paddings or crops (what the converter makes of a dilated convolution)."""

    def _check(self, model):
        self._input = self._tensor(model, 0, constant=False)
        self._output = self._output_tensor(model)
        if len(self._input.shape) != 4:
            self._fail(f"its input has shape {self._input.shape}, not (N, H, W, C)")
        if self._input.quantization != self._output.quantization:
            self._fail("its input and output are quantised differently")
        block = self._tensor(model, 1, dtypes=(np.int32,), constant=True).data
        edges = self._tensor(model, 2, dtypes=(np.int32,), constant=True).data
        if block.size != 2 or edges.size != 4 or np.any(block < 1) or np.any(edges < 0):
            self._fail(f"block shape {block.tolist()} and {edges.tolist()} are not two "
                       f"positive sizes and two (before, after) pairs")
        self._block = tuple(int(b) for b in block)
        self._edges = edges.reshape(2, 2)


class SpaceToBatchND(_BlockOperation):
    def run(self, model, values, matmul):
        x = values[self.inputs[0]]
        padded = [size + int(self._edges[axis].sum()) for axis, size in enumerate(x.shape[1:3])]
        if any(size % block for size, block in zip(padded, self._block)):
            self._fail(f"its padded rows and columns {padded} are not multiples of its block "
                       f"shape {list(self._block)}")
        _check_size(self, len(x) * padded[0] * padded[1] * x.shape[3])
        _, zero = self._output.quantization
        values[self.outputs[0]] = kernels.space_to_batch(x, self._block, self._edges, zero)


class BatchToSpaceND(_BlockOperation):
    def run(self, model, values, matmul):
        x = values[self.inputs[0]]
        bh, bw = self._block
        if len(x) % (bh * bw):
            self._fail(f"its input's batch {len(x)} is not a multiple of its block shape "
                       f"{list(self._block)}")
        if any(int(self._edges[axis].sum()) > size * block for axis, (size, block) in
               enumerate(zip(x.shape[1:3], self._block))):
            self._fail(f"its crops {self._edges.tolist()} are larger than its output")
        values[self.outputs[0]] = kernels.batch_to_space(x, self._block, self._edges)


class Reshape(Operation):
    """RESHAPE (and SQUEEZE, EXPAND_DIMS): to the output tensor's shape, whatever the
    batch."""

    def _check(self, model):
        self._input = self._tensor(model, 0, constant=False)
        self._output = self._output_tensor(model)
        if self._input.quantization != self._output.quantization:
            self._fail("its input and output are quantised differently")
        declared = [int(np.prod(t.shape[1:], dtype=object)) for t in (self._input, self._output)]
        if declared[0] != declared[1]:
            self._fail(f"its input {self._input.shape} and output {self._output.shape} hold "
                       f"different numbers of elements per sample")
        if self.name != "RESHAPE":
            return
        # LiteRT's new shape: the shape input if it is an int32 vector (its value where
        # tpuer can compute it), else the options' new_shape (none: a scalar)
        shape = model.tensors[self.inputs[1]] if len(self.inputs) > 1 and \
            self.inputs[1] >= 0 else None
        if shape is not None and shape.dtype == np.int32 and len(shape.shape) == 1:
            new = _shape_value(model, shape.index)
        else:
            new = self.options.get("new_shape")
            new = [] if new is None or isinstance(new, int) else new
        if new is not None:
            self._check_new_shape([int(d) for d in np.ravel(new)])

    def _check_new_shape(self, new):
        """A constant new shape, as LiteRT's RESHAPE reads it: at most one -1 (the size
        that makes the element counts equal), no other negative size, the input's element
        count, and the output tensor's shape but the batch."""
        total = int(np.prod(self._input.shape, dtype=object))
        if new.count(-1) > 1 or any(d < -1 for d in new):
            self._fail(f"its new shape {new} has a negative size")
        known = int(np.prod([d for d in new if d != -1], dtype=object))
        if -1 in new:
            if known == 0 or total % known:
                self._fail(f"its new shape {new} does not fit its input {self._input.shape}")
            new = [total // known if d == -1 else d for d in new]
        elif known != total:
            self._fail(f"its new shape {new} holds {known:,} elements, its input "
                       f"{self._input.shape} {total:,}")
        if tuple(new[1:]) != tuple(self._output.shape[1:]):
            self._fail(f"its new shape {new} is not its output's {self._output.shape}")

    def run(self, model, values, matmul):
        x = values[self.inputs[0]]
        shape = (len(x), *self._output.shape[1:])
        if int(np.prod(shape)) != x.size:
            self._fail(f"its input of shape {x.shape} does not fit the output shape "
                       f"{self._output.shape} with a batch of {len(x)}")
        values[self.outputs[0]] = x.reshape(shape)


#: TFLite's operators that tpuer runs, and where.
SUPPORTED_OPERATORS = {
    "FULLY_CONNECTED": FullyConnected, "CONV_2D": Conv2D,
    "DEPTHWISE_CONV_2D": DepthwiseConv2D, "MAX_POOL_2D": MaxPool2D,
    "AVERAGE_POOL_2D": AveragePool2D, "MEAN": Mean, "ADD": Add, "SOFTMAX": Softmax,
    "QUANTIZE": Quantize, "DEQUANTIZE": Dequantize, "PAD": Pad, "PADV2": Pad,
    "RESHAPE": Reshape, "SQUEEZE": Reshape, "EXPAND_DIMS": Reshape,
    "SPACE_TO_BATCH_ND": SpaceToBatchND, "BATCH_TO_SPACE_ND": BatchToSpaceND,
}


def _chains(previous, operation, readers, model_output):
    """Whether ``operation`` joins the TPU run that ends with ``previous`` (see
    :meth:`TFLiteModel.runs`)."""
    return (isinstance(previous, FullyConnected) and isinstance(operation, FullyConnected)
            and previous.layer is not None and operation.layer is not None
            and not operation.options.get("keep_num_dims")
            and operation.inputs[0] == previous.outputs[0]
            and readers.get(previous.outputs[0]) == 1 and previous.outputs[0] != model_output)


def _options(tflite, op):
    """The builtin options of operator ``op`` as a dict of the fields tpuer reads."""
    table = op.BuiltinOptions()
    kind = op.BuiltinOptionsType()
    names = {value: name for name, value in vars(tflite.BuiltinOptions).items()
             if not name.startswith("_")}
    name = names.get(kind, "NONE")
    if table is None or name == "NONE":
        return {}
    options = getattr(tflite, name)()
    options.Init(table.Bytes, table.Pos)
    fields = {"activation": "FusedActivationFunction", "padding": "Padding",
              "stride_h": "StrideH", "stride_w": "StrideW",
              "dilation_h": "DilationHFactor", "dilation_w": "DilationWFactor",
              "depth_multiplier": "DepthMultiplier", "filter_h": "FilterHeight",
              "filter_w": "FilterWidth", "keep_num_dims": "KeepNumDims",
              "weights_format": "WeightsFormat", "keep_dims": "KeepDims", "beta": "Beta",
              "values_count": "ValuesCount", "axis": "Axis", "begin_mask": "BeginMask",
              "end_mask": "EndMask", "shrink_axis_mask": "ShrinkAxisMask",
              "ellipsis_mask": "EllipsisMask", "new_axis_mask": "NewAxisMask",
              "offset": "Offset", "out_type": "OutType", "new_shape": "NewShapeAsNumpy"}
    return {key: getattr(options, method)() for key, method in fields.items()
            if hasattr(options, method)}


class TFLiteModel:
    """An int8 TFLite model that tpuer runs: :meth:`reference` computes its output in
    NumPy exactly as LiteRT's reference kernels do; ``tpuer.Device.run(model, x)`` the
    same with the matrix products on the TPU.

    ``input`` and ``output`` are :class:`TensorInfo`; ``operations`` the operators that
    compute the output, in order (operators that only compute a RESHAPE's shape are left
    out)."""

    def __init__(self, tensors, operations, input_index, output_index, *, graph=()):
        self.tensors = tensors
        self.input = tensors[input_index]
        self.output = tensors[output_index]
        #: every operator of the file, as read (``(index, name, inputs, outputs,
        #: options)``), for :func:`_shape_value`
        self.graph = tuple(graph)
        self.operations = []
        for index, name, inputs, outputs, options in operations:
            if name not in SUPPORTED_OPERATORS:
                raise TFLiteError(f"operator {index} ({name}) is not supported; tpuer runs "
                                  f"{', '.join(sorted(SUPPORTED_OPERATORS))}")
            try:
                self.operations.append(SUPPORTED_OPERATORS[name](self, index, name, inputs,
                                                                 outputs, options))
            except TFLiteError:
                raise
            except (ValueError, IndexError, KeyError, OverflowError, ZeroDivisionError,
                    TypeError) as error:
                raise TFLiteError(f"operator {index} ({name}): its tensors do not fit "
                                  f"together ({type(error).__name__}: {error})") from None
        self._runs = None
        self._run_models = {}      # the QuantizedModel of each run on the TPU, made once

    def constant(self, index):
        """The value of constant tensor ``index``, in its shape."""
        tensor = self.tensors[index]
        return tensor.data.reshape(tensor.shape)

    @property
    def input_shape(self):
        """The shape of one sample (the input tensor's shape without its batch axis)."""
        return tuple(self.input.shape[1:])

    def check_input(self, x):
        """Refuse anything but an array of the input's dtype and of shape (batch,
        *input_shape)."""
        dtype = np.dtype(self.input.dtype)
        if not isinstance(x, np.ndarray):
            raise TypeError(f"x must be a NumPy array of dtype {dtype.name}, not "
                            f"{type(x).__name__}")
        if x.dtype != dtype:
            raise TypeError(f"x must have the model's input dtype {dtype.name}, not "
                            f"{x.dtype}")
        if x.ndim != 1 + len(self.input_shape) or x.shape[1:] != self.input_shape:
            raise ValueError(f"x must have shape (batch, {', '.join(map(str, self.input_shape))})"
                             f", not {x.shape}")
        if len(x) == 0:
            raise ValueError("x holds no samples")
        if dtype == np.float32 and not np.all(np.isfinite(x)):
            raise ValueError("x holds a NaN or an infinity")

    def runs(self):
        """The operators in runs that the TPU computes as one: consecutive
        FULLY_CONNECTED operators with a :attr:`~_MatrixOperation.layer` each, each taking
        the one before's output, which nothing else reads (it stays in the Unified
        Buffer); every other operator a run of its own."""
        if self._runs is None:
            self._runs = self._find_runs()
        return self._runs

    def _find_runs(self):
        readers = {}
        for operation in self.operations:
            for tensor in operation.inputs:
                readers[tensor] = readers.get(tensor, 0) + 1
        runs = []
        for operation in self.operations:
            if runs and _chains(runs[-1][-1], operation, readers, self.output.index):
                runs[-1].append(operation)
            else:
                runs.append([operation])
        return runs

    def run(self, x, matmul, *, layers=None, after=None):
        """The output for ``x``, the int8 products computed by ``matmul(a, b)``.

        With ``layers``, each run of :meth:`runs` whose operators have a
        :attr:`~_MatrixOperation.layer` is computed by ``layers(run, model, rows)``:
        ``model`` a :class:`~tpuer.quantize.QuantizedModel` of their layers, ``rows`` the
        first one's input rows; it returns the last one's output rows. ``after(operation,
        output)`` is called when each operator is done (in such a run, the last)."""
        self.check_input(x)
        values = {self.input.index: x}
        for run in self.runs() if layers is not None else [[op] for op in self.operations]:
            first, last = run[0], run[-1]
            try:
                self._run_operators(run, values, matmul, layers)
            except TFLiteError:
                raise
            except (ValueError, IndexError, KeyError, OverflowError, ZeroDivisionError,
                    MemoryError) as error:
                first._fail(f"its tensors do not fit together ({type(error).__name__}: "
                            f"{error})")
            if after is not None:
                after(last, values[last.outputs[0]])
        return values[self.output.index]

    def _run_operators(self, run, values, matmul, layers):
        """One run of :meth:`run`: its outputs into ``values``."""
        first, last = run[0], run[-1]
        if layers is None or getattr(first, "layer", None) is None:
            first.run(self, values, matmul)
            return
        rows, shape = first.rows(values[first.inputs[0]])
        if len(run) > 1:
            shape = (-1, last.layer.n)
        model = self._run_models.get(first.index)
        if model is None:
            model = self._run_models[first.index] = QuantizedModel(
                [op.layer for op in run], input_shape=(first.layer.k,),
                input_scale=first.layer.input_scale,
                input_zero_point=first.layer.input_zero_point)
        values[last.outputs[0]] = np.asarray(layers(run, model, rows)).reshape(shape)

    def reference(self, x):
        """The output for ``x`` computed in NumPy: what LiteRT's interpreter with its
        reference kernels gives, bit for bit, in dtype and shape."""
        return self.run(x, lambda a, b: a.astype(np.int64) @ b.astype(np.int64))

    def macs_per_sample(self):
        return sum(operation.macs(self) for operation in self.operations)

    def mapping(self):
        """Each operator: ``(index, name, where, MACs per sample)``, ``where`` ``"TPU"``
        (product and requantisation), ``"TPU+host"`` (the product; the host requantises:
        the operator's ``host_requantisation`` says why) or ``"host"``."""
        def where(op):
            if not op.on_tpu:
                return "host"
            return "TPU" if op.layer is not None else "TPU+host"
        return [(op.index, op.name, where(op), op.macs(self)) for op in self.operations]

    def report(self, cfg):
        """The mapping of :meth:`mapping` with the cycles of one inference on a TPU of
        configuration ``cfg``, by the cycle model (the golden back end, whose counters
        equal the RTL's), as text lines. Operators that run as one program (:meth:`runs`)
        show their cycles on the first."""
        from .device import Device
        from .profile import bound_by, profile_rows
        device = Device(cfg, trace=True)
        sample = np.zeros((1, *self.input_shape), np.dtype(self.input.dtype))
        device.run(self, sample, progress=False)
        cycles = device.operator_cycles
        # which roof bounds each TPU operator (its last, for a run of them)
        bounds = {row["args"]["operators"][-1]: bound_by(cfg, row["macs"], row["host_bytes"])
                  for row in profile_rows(device.trace)}
        last_of = {run[0].index: run[-1].index for run in self.runs()}
        first_of = {op.index: run[0].index for run in self.runs() for op in run}
        lines = [f"{'op':>3}  {'operator':<18} {'runs on':<8} {'MACs':>9} {'cycles':>8}  "
                 f"bound by"]
        for index, name, where, macs in self.mapping():
            bound = ""
            if index in cycles:
                shown = f"{cycles[index]:,}"
                bound = bounds.get(last_of.get(index, index), "")
            elif first_of[index] != index:
                shown = f"(op {first_of[index]})"
            else:
                shown = "-"
            lines.append(f"{index:>3}  {name:<18} {where:<8} {macs:>9,} {shown:>8}  "
                         f"{bound}".rstrip())
        for op in self.operations:
            if op.on_tpu and op.layer is None:
                lines.append(f"op {op.index}: the host requantises, as {op.host_requantisation}")
        on_tpu = sum(op.on_tpu for op in self.operations)
        total = device.stats["cycles"]
        utilisation = device.stats["macs"] / (cfg.rows * cfg.cols * total) if total else 0.0
        lines.append(f"{on_tpu} of {len(self.operations)} operators on the TPU, "
                     f"{len(self.operations) - on_tpu} on the host; "
                     f"{self.macs_per_sample():,} MACs and {total:,} TPU cycles per "
                     f"inference on the {cfg.rows}x{cfg.cols} TPU (MXU utilisation "
                     f"{100 * utilisation:.1f}%)")
        lines.append("bound by: the roof of the roofline (tpuer profile) that limits the "
                     "operator: the array's peak (compute) or the host word stream's "
                     "bandwidth (host stream)")
        return lines


def _read(source):
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        try:
            with open(source, "rb") as file:
                return file.read()
        except OSError as error:
            raise TFLiteError(f"cannot read {source}: {error.strerror}") from None
    raise TypeError(f"a TFLite model is a path or bytes, not {type(source).__name__}")


def from_tflite(source):
    """The TFLite model in file ``source`` (a path) or in ``source`` (bytes), checked: one
    subgraph with one input and one output, int8 activations (float32 only into a leading
    QUANTIZE or out of a trailing DEQUANTIZE), and only :data:`SUPPORTED_OPERATORS` on the
    way from the input to the output. Anything else raises :class:`TFLiteError` naming the
    operator and its index."""
    try:
        import tflite
    except ImportError:
        raise ImportError("reading TFLite models needs the tflite package: "
                          "pip install tflite") from None
    data = _read(source)
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise TFLiteError("not a TFLite model (no TFL3 identifier in its first 8 bytes)")
    try:
        verify(data)
    except FlatbufferError as error:
        raise TFLiteError(f"the TFLite file is damaged (as flatbuffers' verifier checks it, "
                          f"which LiteRT runs): {error}") from None
    try:
        model = tflite.Model.GetRootAsModel(data, 0)
        graph, tensors, operations = _parse(tflite, model)
        inputs, outputs = list(graph.InputsAsNumpy()), list(graph.OutputsAsNumpy())
    except TFLiteError:
        raise
    except Exception as error:          # the flatbuffer's own checks: a damaged file
        raise TFLiteError(f"the TFLite file is damaged: {type(error).__name__}: {error}") \
            from None
    if len(inputs) != 1 or len(outputs) != 1:
        raise TFLiteError(f"the model has {len(inputs)} inputs and {len(outputs)} outputs; "
                          f"tpuer runs models with one of each")
    _validate(tensors, operations, [int(i) for i in inputs + outputs])
    for kind, i in (("input", int(inputs[0])), ("output", int(outputs[0]))):
        if 0 in tensors[i].shape:
            raise TFLiteError(f"the model's {kind}, tensor {i}, has shape "
                              f"{tensors[i].shape}, which holds nothing")
    if not any(int(outputs[0]) in op[3] for op in operations):
        raise TFLiteError(f"the model's output, tensor {int(outputs[0])}, is computed by no "
                          f"operator")
    needed = _needed(operations, outputs[0])
    produced = {out for op in operations for out in op[3]}
    for index, name, op_inputs, _, _ in operations:
        for i in op_inputs:
            if i >= 0 and i != int(inputs[0]) and i not in produced and tensors[i].data is None:
                raise TFLiteError(f"operator {index} ({name}) reads tensor {i} "
                                  f"({tensors[i].name!r}), which is no constant, not the "
                                  f"model's input, and computed by no operator")
    model = TFLiteModel(tensors, needed, int(inputs[0]), int(outputs[0]), graph=operations)
    # LiteRT prepares every operator, the output's or not: so are they checked here.
    chosen = {op[0] for op in needed}
    for op in operations:
        if op[0] in chosen:
            continue
        if op[1] in _SHAPE_OPERATORS:
            _check_shape_operator(tensors, *op)
        else:
            TFLiteModel(tensors, [op], int(inputs[0]), int(outputs[0]), graph=operations)
    return model


def _shape_value(model, index, depth=0):
    """The value of tensor ``index`` if it is a constant, or computed from constants and
    the declared shapes by the shape operators (SHAPE, STRIDED_SLICE of a vector, PACK),
    as LiteRT computes a RESHAPE's new shape; ``None`` where tpuer cannot tell."""
    tensor = model.tensors[index]
    if tensor.data is not None:
        return tensor.data.reshape(tensor.shape)
    producer = next((op for op in model.graph if index in op[3]), None)
    if producer is None or depth > 16:
        return None
    _, name, inputs, _, options = producer
    if name == "SHAPE":
        return np.array(model.tensors[inputs[0]].shape, np.int64)
    values = [_shape_value(model, i, depth + 1) for i in inputs]
    if any(v is None for v in values):
        return None
    if name == "PACK":
        if len({v.shape for v in values}) != 1:
            raise TFLiteError(f"operator {producer[0]} (PACK): its inputs' values have "
                              f"different shapes {[v.shape for v in values]}")
        return np.stack(values, axis=options.get("axis", 0))
    if name == "STRIDED_SLICE" and values[0].ndim == 1 and all(v.size == 1 for v in values[1:]) \
            and not options.get("ellipsis_mask") and not options.get("new_axis_mask") \
            and not options.get("offset"):
        sliced = _strided_slice_1d(values[0], *(int(np.ravel(v)[0]) for v in values[1:]),
                                   options)
        if sliced is None:
            raise TFLiteError(f"operator {producer[0]} (STRIDED_SLICE): it reads outside its "
                              f"input of {len(values[0])} values")
        return sliced
    return None


def _strided_slice_1d(vector, begin, end, stride, options):
    """STRIDED_SLICE of a vector with its begin, end and shrink masks, as LiteRT's
    ``StartForAxis`` and ``StopForAxis`` bound it; ``None`` where LiteRT would read outside
    the vector or shrink to nothing (its result is then undefined)."""
    n, low, high = len(vector), -(1 << 31), (1 << 31) - 1
    if stride == 0 or n == 0:
        return None

    def bounded(index):
        index = index + n if index < 0 else index
        return min(max(index, 0), n) if stride > 0 else min(max(index, -1), n - 1)

    start = bounded((low if stride > 0 else high) if options.get("begin_mask", 0) & 1
                    else begin)
    shrink = options.get("shrink_axis_mask", 0) & 1
    if shrink:
        stop = start + 1
    else:
        stop = bounded((high if stride > 0 else low) if options.get("end_mask", 0) & 1
                       else end)
    picked = list(range(start, stop, stride))
    if any(not 0 <= i < n for i in picked) or (shrink and len(picked) != 1):
        return None
    return np.array(vector[picked[0]]) if shrink else np.array([vector[i] for i in picked])


#: Operators that only compute a RESHAPE's new shape (tpuer reshapes to the output tensor's
#: shape, so it never runs them); LiteRT prepares them all the same, so tpuer checks what
#: their Prepare checks.
_SHAPE_OPERATORS = ("SHAPE", "STRIDED_SLICE", "PACK")


def _check_shape_operator(tensors, index, name, inputs, outputs, options):
    def fail(problem):
        raise TFLiteError(f"operator {index} ({name}): {problem}")

    if len(outputs) != 1 or any(i < 0 for i in inputs):
        fail("it must have its inputs and one output")
    values = [tensors[i] for i in inputs]
    output = tensors[outputs[0]]
    if name == "SHAPE":
        if len(values) != 1 or output.dtype not in (np.int32, np.int64) or \
                options.get("out_type", 2) not in (2, 4):
            fail("it takes one input and gives int32 or int64")
    elif name == "STRIDED_SLICE":
        if len(values) != 4:
            fail(f"it has {len(values)} inputs, not 4")
        if len(values[0].shape) > 5 or values[0].dtype != output.dtype:
            fail("its input must have at most 5 axes and its output's type")
        ends = values[1:]
        if any(t.dtype != np.int32 or len(t.shape) != 1 for t in ends) or \
                len({t.shape for t in ends}) != 1:
            fail("its begin, end and strides must be int32 vectors of one length")
        if values[3].data is not None and np.any(values[3].data == 0):
            fail("its strides must not be 0")
    else:                                                      # PACK
        count, axis = options.get("values_count", 0), options.get("axis", 0)
        if count < 1 or len(values) != count:
            fail(f"it has {len(values)} inputs but values_count {count}")
        if len({(t.shape, t.dtype) for t in values}) != 1 or output.dtype != values[0].dtype:
            fail("its inputs must have one shape and one type, its output's")
        if not -(len(values[0].shape) + 1) <= axis <= len(values[0].shape):
            fail(f"its axis {axis} is out of range")


#: The largest requantisation scale (``s_in * s_w / s_out``) tpuer takes: far beyond any a
#: converter writes, and below those at which the kernels' int32 arithmetic overflows.
MAX_EFFECTIVE_SCALE = float(1 << 16)
#: The TFLite schema's version, the only one LiteRT reads.
SCHEMA_VERSION = 3
#: The highest operator version tpuer reads (LiteRT's kernels have at most a few dozen).
MAX_OPERATOR_VERSION = 100
#: The largest BuiltinOperator of the TFLite schema that tpuer knows.
MAX_BUILTIN_OPERATOR = 208
#: The largest TensorType of the TFLite schema (BFLOAT16).
MAX_TENSOR_TYPE = 18
#: The most bytes tpuer accepts in one tensor, as LiteRT's 32-bit size arithmetic does.
MAX_TENSOR_BYTES = (1 << 31) - 1
#: The most elements tpuer accepts in one tensor: its host kernels work in int64, so a
#: tensor costs up to eight times its int8 size while it is computed.
MAX_TENSOR_ELEMENTS = 1 << 27
#: The range of a zero point of each quantised type.
_ZERO_POINT_RANGES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255),
                      np.dtype(np.int16): (0, 0), np.dtype(np.int32): (0, 0),
                      np.dtype(np.int64): (0, 0)}


def _validate(tensors, operations, graph_tensors):
    """Check every index, size and quantisation parameter of the model, before anything
    is allocated or run, against what the TFLite schema and LiteRT's interpreter accept
    (and what a converter writes); a :class:`TFLiteError` names the tensor or operator, its
    index and the rule."""
    count = len(tensors)
    for i in graph_tensors:
        if not 0 <= i < count:
            raise TFLiteError(f"the subgraph's input or output is tensor {i}; it has "
                              f"tensors 0 to {count - 1}")
    for index, tensor in tensors.items():
        _validate_tensor(index, tensor)
    for index, name, inputs, outputs, _ in operations:
        for kind, indices, lowest in (("input", inputs, -1), ("output", outputs, 0)):
            for i in indices:
                if not lowest <= i < count:
                    raise TFLiteError(f"operator {index} ({name}): its {kind} tensor index "
                                      f"{i} is out of range (the subgraph has {count} "
                                      f"tensors)")
        both = set(inputs) & set(outputs)
        if both:
            raise TFLiteError(f"operator {index} ({name}): tensor {min(both)} is both its "
                              f"input and its output")


def _validate_tensor(index, tensor):
    where = f"tensor {index} ({tensor.name!r})"
    if any(d < 0 for d in tensor.shape):
        raise TFLiteError(f"{where}: its shape {tensor.shape} has a negative size")
    size = int(np.prod(tensor.shape, dtype=object)) if tensor.shape else 1
    itemsize = np.dtype(tensor.dtype).itemsize if tensor.dtype is not None else 1
    if size * itemsize > MAX_TENSOR_BYTES or size > MAX_TENSOR_ELEMENTS:
        raise TFLiteError(f"{where}: its shape {tensor.shape} holds {size:,} elements; tpuer "
                          f"takes at most {MAX_TENSOR_ELEMENTS:,} in a tensor (and "
                          f"{MAX_TENSOR_BYTES:,} bytes)")
    if tensor.data is not None and tensor.data.size != size:
        raise TFLiteError(f"{where}: its buffer holds {tensor.data.size:,} values, its shape "
                          f"{tensor.shape} {size:,}")
    if tensor.scale is None:
        return
    scales, zeros = tensor.scale, tensor.zero_point
    if len(zeros) != len(scales):
        raise TFLiteError(f"{where}: {len(scales)} scales but {len(zeros)} zero points")
    if len(scales) > 1:
        if not 0 <= tensor.axis < len(tensor.shape):
            raise TFLiteError(f"{where}: its quantised dimension {tensor.axis} is not an axis "
                              f"of its shape {tensor.shape}")
        if len(scales) != tensor.shape[tensor.axis]:
            raise TFLiteError(f"{where}: {len(scales)} scales along axis {tensor.axis} of size "
                              f"{tensor.shape[tensor.axis]}")
    if not np.all(np.isfinite(scales)) or np.any(scales <= 0):
        raise TFLiteError(f"{where}: its scales must be positive and finite, not "
                          f"{scales[:4].tolist()}")
    low, high = _ZERO_POINT_RANGES.get(np.dtype(tensor.dtype) if tensor.dtype else None,
                                       (None, None))
    if low is not None and (zeros.min() < low or zeros.max() > high):
        raise TFLiteError(f"{where}: a zero point of {tensor.dtype.__name__} must be in "
                          f"[{low}, {high}], not {zeros[(zeros < low) | (zeros > high)][0]}")


def _parse(tflite, model):
    from tflite.utils import BUILTIN_OPCODE2NAME
    if model.Version() != SCHEMA_VERSION:
        raise TFLiteError(f"the model's schema version is {model.Version()}; TFLite "
                          f"interpreters read version {SCHEMA_VERSION}")
    for k in range(model.SignatureDefsLength()):
        if model.SignatureDefs(k).SignatureKey() is None:
            raise TFLiteError(f"signature {k} has no key (LiteRT refuses a signature without "
                              f"its exported method's name)")
    if model.SubgraphsLength() != 1:
        raise TFLiteError(f"the model has {model.SubgraphsLength()} subgraphs; tpuer runs "
                          f"models with one")
    graph = model.Subgraphs(0)
    buffers = [model.Buffers(i) for i in range(model.BuffersLength())]
    tensors = {}
    for index in range(graph.TensorsLength()):
        tensor = graph.Tensors(index)
        if not 0 <= tensor.Type() <= MAX_TENSOR_TYPE:
            raise TFLiteError(f"tensor {index}: its type {tensor.Type()} is not a TFLite type")
        dtype = _DTYPES.get(tensor.Type())
        quantization = tensor.Quantization()
        scale = zero_point = None
        axis = 0
        if quantization is not None and quantization.ScaleLength():
            scale = quantization.ScaleAsNumpy().astype(np.float32)
            zero_point = quantization.ZeroPointAsNumpy().astype(np.int64)
            axis = quantization.QuantizedDimension()
        constant = None
        if tensor.Buffer() >= len(buffers):
            raise TFLiteError(f"tensor {index}: its buffer index {tensor.Buffer()} is out of "
                              f"range (the model has {len(buffers)} buffers)")
        buffer = buffers[tensor.Buffer()]
        if buffer is not None and buffer.DataLength() and dtype is not None:
            constant = np.frombuffer(buffer.DataAsNumpy().tobytes(), dtype=np.dtype(dtype)
                                     .newbyteorder("<")).astype(dtype)
        shape = tuple(int(d) for d in tensor.ShapeAsNumpy()) if tensor.ShapeLength() else ()
        tensors[index] = TensorInfo(index, tensor.Name().decode(errors="replace"), shape,
                                    dtype, scale, zero_point, axis, constant)
    operations = []
    for index in range(graph.OperatorsLength()):
        op = graph.Operators(index)
        if op.OpcodeIndex() >= model.OperatorCodesLength():
            raise TFLiteError(f"operator {index}: its operator code index {op.OpcodeIndex()} "
                              f"is out of range (the model has {model.OperatorCodesLength()})")
        code = model.OperatorCodes(op.OpcodeIndex())
        if not 1 <= code.Version() <= MAX_OPERATOR_VERSION:
            raise TFLiteError(f"operator {index}: its operator version {code.Version()} is "
                              f"not one a TFLite interpreter has (1 to {MAX_OPERATOR_VERSION})")
        number = _builtin_code(code)
        if not 0 <= number <= MAX_BUILTIN_OPERATOR:
            raise TFLiteError(f"operator {index}: its builtin operator code {number} is not "
                              f"one of TFLite's (0 to {MAX_BUILTIN_OPERATOR})")
        name = BUILTIN_OPCODE2NAME.get(number, f"builtin {number}")
        if number == 32:        # CUSTOM
            name = f"CUSTOM {code.CustomCode().decode(errors='replace')}"
        operations.append((index, name, [int(i) for i in op.InputsAsNumpy()],
                           [int(i) for i in op.OutputsAsNumpy()], _options(tflite, op)))
    return graph, tensors, operations


def _builtin_code(code):
    """The operator code's builtin operator as LiteRT reads it: the larger of its
    ``builtin_code`` field and its ``deprecated_builtin_code`` (the ``tflite`` package's
    own ``BuiltinCode()`` answers the deprecated field whenever the new one is below 127,
    which is not what LiteRT does)."""
    import flatbuffers
    offset = code._tab.Offset(10)
    raw = code._tab.Get(flatbuffers.number_types.Int32Flags, offset + code._tab.Pos) \
        if offset else 0
    return max(raw, code.DeprecatedBuiltinCode())


def _needed(operations, output):
    """The operators the output depends on, in file order; RESHAPE's shape input is not
    followed (tpuer reshapes to the output tensor's shape)."""
    producer = {out: op for op in operations for out in op[3]}
    wanted, needed = [output], set()
    while wanted:
        tensor = wanted.pop()
        op = producer.get(tensor)
        if op is None or op[0] in needed:
            continue
        needed.add(op[0])
        index, name, inputs, _, _ = op
        followed = inputs[:1] if name == "RESHAPE" else inputs
        wanted += [i for i in followed if i >= 0]
    return [op for op in operations if op[0] in needed]


def litert_output(path, x, *, tensors=()):
    """What LiteRT's interpreter with its reference kernels (``BUILTIN_REF``) gives for
    ``x`` (of any batch) from the model in file ``path``: the oracle tpuer is compared with.
    With ``tensors`` (indices), ``(output, {index: value})``, the values those tensors had.
    ``None`` without the ai-edge-litert package."""
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        return None
    interpreter = Interpreter(model_path=str(path),
                              experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                              experimental_preserve_all_tensors=bool(tensors))
    index = interpreter.get_input_details()[0]["index"]
    interpreter.resize_tensor_input(index, x.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(index, x)
    interpreter.invoke()
    output = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    if not tensors:
        return output
    return output, {i: interpreter.get_tensor(i) for i in tensors}
