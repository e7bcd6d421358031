"""Quantisation: float networks (dense and 2-D convolution layers) to int8 models that the
TPU runs, and the NumPy int8 reference of those models.

The scheme is the TFLite / gemmlowp one that the activation unit implements:

* activations: int8, asymmetric, ``real = scale * (q - zero_point)``, the range of each
  tensor taken from calibration inputs (0 always inside it);
* weights: int8, symmetric (zero point 0), one scale per output channel (or one per layer);
* accumulation: int32, ``acc = sum(x_q * w_q)``; the input zero point and the float bias
  are folded into one int32 bias per channel, ``bias = round(b / (s_x s_w)) - z_x sum_k
  w_q``, since ``s_x s_w (acc - z_x sum_k w_q) + b`` is the real pre-activation;
* requantisation: ``q_out = z_out + (acc + bias) * M`` with ``M = s_x s_w / s_out`` as a
  Q0.31 multiplier and a right shift, rounded and clamped (ReLU clamps at ``z_out``): the
  very arithmetic of :func:`tpuer.sim.activation_model.requantize_lanes`.
"""

from dataclasses import dataclass, field

import numpy as np

from .isa import Rounding
from .sim.activation_model import quantize_multiplier, requantize_lanes

__all__ = ["Dense", "Conv2D", "QuantizedLayer", "QuantizedModel", "quantize", "quantize_mlp",
           "im2col", "conv_output_size", "float_forward"]

INT8_MIN, INT8_MAX = -128, 127
ACC_MIN, ACC_MAX = -(1 << 31), (1 << 31) - 1
#: The largest K whose int8 x int8 sums can never leave int32.
MAX_K = ACC_MAX // (128 * 128)


def _finite_float_array(name, value, ndim=None):
    array = np.asarray(value)
    if array.dtype == object or not (np.issubdtype(array.dtype, np.floating) or
                                     np.issubdtype(array.dtype, np.integer)):
        raise TypeError(f"{name} must be a numeric array, not {array.dtype}")
    if ndim is not None and array.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, not of shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return array.astype(np.float64)


@dataclass
class Dense:
    """A float dense layer: ``y = x @ weights + bias``, then ReLU if ``relu``.
    ``weights`` has shape (inputs, outputs), as scikit-learn's ``coefs_``."""
    weights: np.ndarray
    bias: np.ndarray
    relu: bool = True


@dataclass
class Conv2D:
    """A float 2-D convolution over NHWC tensors: ``weights`` of shape (kernel height,
    kernel width, in channels, out channels), ``bias`` (out channels,), ``stride`` and
    zero ``padding`` on each side, then ReLU if ``relu``."""
    weights: np.ndarray
    bias: np.ndarray
    stride: int = 1
    padding: int = 0
    relu: bool = True


def conv_output_size(height, width, kernel, stride, padding):
    """(out height, out width) of a convolution with ``kernel`` (kh, kw)."""
    kh, kw = kernel
    return (height + 2 * padding - kh) // stride + 1, (width + 2 * padding - kw) // stride + 1


def im2col(x, kernel, stride, padding, pad_value):
    """Patches of NHWC ``x`` as rows: shape (n * out_h * out_w, kh * kw * channels), in
    (kernel row, kernel column, channel) order, padded with ``pad_value``."""
    n, h, w, c = x.shape
    kh, kw = kernel
    padded = np.full((n, h + 2 * padding, w + 2 * padding, c), pad_value, dtype=x.dtype)
    padded[:, padding:padding + h, padding:padding + w] = x
    out_h, out_w = conv_output_size(h, w, kernel, stride, padding)
    cols = np.empty((n, out_h, out_w, kh, kw, c), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            rows_i = slice(i, i + stride * out_h, stride)
            cols_j = slice(j, j + stride * out_w, stride)
            cols[:, :, :, i, j] = padded[:, rows_i, cols_j]
    return cols.reshape(n * out_h * out_w, kh * kw * c)


@dataclass
class QuantizedLayer:
    """One int8 layer: a matrix product of ``weights`` (int8, (K, N)) followed by
    requantisation with ``bias`` (int32), ``multiplier`` and ``shift`` (per output
    channel), ``output_zero_point``, ``relu``, ``rounding`` and ``clamp`` (the bounds,
    ``None`` for the int8 range's ends), as
    :func:`tpuer.sim.activation_model.requantize_lanes` computes it. A convolution keeps
    its geometry and is a matrix product of im2col rows."""
    kind: str
    weights: np.ndarray
    bias: np.ndarray
    multiplier: np.ndarray
    shift: np.ndarray
    input_scale: float
    input_zero_point: int
    output_scale: float
    output_zero_point: int
    relu: bool
    input_shape: tuple          # of one sample
    output_shape: tuple
    kernel: tuple = (1, 1)
    stride: int = 1
    padding: int = 0
    rounding: Rounding = Rounding.DOUBLE
    clamp: tuple = (None, None)

    @property
    def k(self):
        return self.weights.shape[0]

    @property
    def n(self):
        return self.weights.shape[1]

    def rows_of(self, x):
        """The rows this layer multiplies, for int8 input ``x`` of shape (batch, *input_shape)."""
        if self.kind == "conv2d":
            return im2col(x, self.kernel, self.stride, self.padding, self.input_zero_point)
        return x.reshape(len(x), -1)

    def output_of(self, rows, batch):
        """Result rows back into (batch, *output_shape)."""
        return rows.reshape(batch, *self.output_shape)

    def requantize(self, acc):
        return requantize_lanes(acc, bias=self.bias, multiplier=self.multiplier,
                                shift=self.shift, zero_point=self.output_zero_point,
                                relu=self.relu, rounding=self.rounding, clamp=self.clamp)

    def reference(self, x):
        rows = self.rows_of(x).astype(np.int64)
        acc = rows @ self.weights.astype(np.int64)
        return self.output_of(self.requantize(acc).astype(np.int8), len(x))

    @property
    def macs_per_sample(self):
        positions = int(np.prod(self.output_shape[:-1])) if self.kind == "conv2d" else 1
        return positions * self.k * self.n


@dataclass
class QuantizedModel:
    """An int8 network: ``layers`` run one after another. :meth:`reference` is the NumPy
    int8 result, which ``tpuer.Device.run`` reproduces bit for bit."""
    layers: list
    input_shape: tuple
    input_scale: float
    input_zero_point: int
    output_scale: float = field(init=False)
    output_zero_point: int = field(init=False)
    #: Its compiled plans by configuration (:func:`tpuer.compiler.compiled`): a model is
    #: compiled once per configuration, so its layers are not to be changed afterwards.
    plans: dict = field(init=False, repr=False, compare=False, default_factory=dict)

    def __post_init__(self):
        self.output_scale = self.layers[-1].output_scale
        self.output_zero_point = self.layers[-1].output_zero_point

    @property
    def output_shape(self):
        return self.layers[-1].output_shape

    def check_input(self, x):
        """Refuse anything but int8 samples of :attr:`input_shape`."""
        if not isinstance(x, np.ndarray):
            raise TypeError(f"x must be a NumPy array of dtype int8, not {type(x).__name__}")
        if x.dtype != np.int8:
            raise TypeError(f"x must have dtype int8, not {x.dtype} (use quantize_input)")
        if x.ndim != 1 + len(self.input_shape) or x.shape[1:] != tuple(self.input_shape):
            raise ValueError(f"x must have shape (batch, {', '.join(map(str, self.input_shape))})"
                             f", not {x.shape}")
        if len(x) == 0:
            raise ValueError("x holds no samples")

    def quantize_input(self, x):
        """Float samples to the int8 input of the first layer."""
        x = _finite_float_array("x", x)
        if x.shape[1:] != tuple(self.input_shape):
            raise ValueError(f"x must have shape (batch, {', '.join(map(str, self.input_shape))})"
                             f", not {x.shape}")
        q = np.round(x / self.input_scale) + self.input_zero_point
        return np.clip(q, INT8_MIN, INT8_MAX).astype(np.int8)

    def dequantize_output(self, y):
        """The int8 output back to real values."""
        y = np.asarray(y)
        if y.dtype != np.int8:
            raise TypeError(f"y must have dtype int8, not {y.dtype}")
        return self.output_scale * (y.astype(np.float64) - self.output_zero_point)

    def reference(self, x):
        """The int8 output of the model for int8 input ``x``, computed in NumPy with the
        activation unit's arithmetic."""
        self.check_input(x)
        for layer in self.layers:
            x = layer.reference(x)
        return x

    @property
    def macs_per_sample(self):
        return sum(layer.macs_per_sample for layer in self.layers)


def _range_quantization(low, high, relu, *, widen=1.0):
    """Scale and zero point of an int8 tensor covering ``[low, high]`` (0 included), the
    scale ``widen`` times coarser than needed."""
    low, high = min(0.0, low), max(0.0, high)
    if relu:
        low = 0.0
    if high - low < 1e-12:
        high = low + 1e-6
    scale = widen * (high - low) / (INT8_MAX - INT8_MIN)
    zero_point = int(np.clip(round(INT8_MIN - low / scale), INT8_MIN, INT8_MAX))
    return scale, zero_point


def _float_layer(layer, x):
    """The float output of one layer for samples ``x``."""
    if isinstance(layer, Conv2D):
        kh, kw, _, cout = layer.weights.shape
        n, h, w, _ = x.shape
        rows = im2col(x, (kh, kw), layer.stride, layer.padding, 0.0)
        out = rows @ layer.weights.reshape(-1, cout) + layer.bias
        out = out.reshape(n, *conv_output_size(h, w, (kh, kw), layer.stride, layer.padding),
                          cout)
    else:
        out = x.reshape(len(x), -1) @ layer.weights + layer.bias
    return np.maximum(out, 0.0) if layer.relu else out


def float_forward(layers, x):
    """The float network's output for samples ``x`` (what :func:`quantize` calibrates on)."""
    for layer in layers:
        x = _float_layer(layer, x)
    return x


def _check_layer(index, layer, shape):
    """Validate one float layer against the shape of one input sample; returns the shape
    of one output sample."""
    where = f"layer {index}"
    if isinstance(layer, Dense):
        weights = _finite_float_array(f"{where} weights", layer.weights, 2)
        bias = _finite_float_array(f"{where} bias", layer.bias, 1)
        inputs = int(np.prod(shape))
        if weights.shape[0] != inputs:
            raise ValueError(f"{where} takes {weights.shape[0]} inputs, but its input has "
                             f"{inputs} values (shape {tuple(shape)})")
        if bias.shape != (weights.shape[1],):
            raise ValueError(f"{where} has {weights.shape[1]} outputs but a bias of shape "
                             f"{bias.shape}")
        return (weights.shape[1],)
    if isinstance(layer, Conv2D):
        weights = _finite_float_array(f"{where} weights", layer.weights, 4)
        bias = _finite_float_array(f"{where} bias", layer.bias, 1)
        if len(shape) != 3:
            raise ValueError(f"{where} is a convolution; its input must be (height, width, "
                             f"channels), not {tuple(shape)}")
        kh, kw, cin, cout = weights.shape
        if cin != shape[2]:
            raise ValueError(f"{where} takes {cin} input channels, its input has {shape[2]}")
        if bias.shape != (cout,):
            raise ValueError(f"{where} has {cout} output channels but a bias of shape "
                             f"{bias.shape}")
        if not (isinstance(layer.stride, int) and layer.stride >= 1):
            raise ValueError(f"{where}: stride must be an integer >= 1, not {layer.stride!r}")
        if not (isinstance(layer.padding, int) and layer.padding >= 0):
            raise ValueError(f"{where}: padding must be an integer >= 0, not {layer.padding!r}")
        out_h, out_w = conv_output_size(shape[0], shape[1], (kh, kw), layer.stride,
                                        layer.padding)
        if out_h < 1 or out_w < 1:
            raise ValueError(f"{where}: a {kh}x{kw} kernel does not fit an input of "
                             f"{shape[0]}x{shape[1]} with padding {layer.padding}")
        return (out_h, out_w, cout)
    raise TypeError(f"{where} must be a tpuer.Dense or tpuer.Conv2D, not {type(layer).__name__}")


def quantize(layers, calibration_x, *, per_channel=True):
    """An int8 :class:`QuantizedModel` of float ``layers`` (:class:`Dense`,
    :class:`Conv2D`), with activation ranges taken from ``calibration_x`` (float samples:
    (n, features) for a dense first layer, (n, height, width, channels) for a
    convolution). Raises ``ValueError`` or ``TypeError`` naming the layer and the problem.
    """
    if not isinstance(layers, (list, tuple)) or not layers:
        raise ValueError("layers must be a non-empty list of tpuer.Dense / tpuer.Conv2D")
    x = _finite_float_array("calibration_x", calibration_x)
    if x.ndim < 2 or len(x) == 0:
        raise ValueError(f"calibration_x must hold samples along its first axis, not shape "
                         f"{x.shape}")
    shape = x.shape[1:]
    shapes = [tuple(shape)]
    for index, layer in enumerate(layers):
        shapes.append(_check_layer(index, layer, shapes[-1]))

    in_scale, in_zero = _range_quantization(float(x.min()), float(x.max()), relu=False)
    model_in = (in_scale, in_zero)
    quantized = []
    for index, layer in enumerate(layers):
        with np.errstate(over="ignore", invalid="ignore"):
            out = _float_layer(layer, x)
        if not np.isfinite(out).all():
            raise ValueError(f"layer {index}: the float network's outputs overflow (inf or "
                             f"NaN) on calibration_x; scale its weights or inputs down")
        out_scale, out_zero = _range_quantization(float(out.min()), float(out.max()), layer.relu)
        w = np.asarray(layer.weights, np.float64)
        w = w.reshape(-1, w.shape[-1])                         # (K, N), K in im2col order
        if w.shape[0] > MAX_K:
            raise ValueError(f"layer {index} sums {w.shape[0]} products per output; at most "
                             f"{MAX_K} keep int32 exact")
        peak = np.abs(w).max(axis=0) if per_channel else np.full(w.shape[1], np.abs(w).max())
        w_scale = np.where(peak > 0, peak / INT8_MAX, 1.0)
        w_q = np.clip(np.round(w / w_scale), -INT8_MAX, INT8_MAX).astype(np.int64)
        # Requantisation needs M = s_x s_w / s_out < 1; widen the output range if not.
        m = in_scale * w_scale / out_scale
        if m.max() >= 1.0:
            out_scale, out_zero = _range_quantization(float(out.min()), float(out.max()),
                                                      layer.relu, widen=m.max() / 0.999)
            m = in_scale * w_scale / out_scale
        if not (np.isfinite(m).all() and np.isfinite(w_scale).all()) or \
                (m[peak > 0] < 2.0 ** -31).any():
            raise ValueError(f"layer {index}: its scales cannot be requantised in int32 "
                             f"(input scale {in_scale:.3g}, output scale {out_scale:.3g}, "
                             f"weight scales up to {w_scale.max():.3g})")
        pairs = [quantize_multiplier(float(value)) if value > 0 else (0, 0) for value in m]
        bias = np.round(np.asarray(layer.bias, np.float64) / (in_scale * w_scale))
        bias = bias - in_zero * w_q.sum(axis=0)
        if bias.min() < ACC_MIN or bias.max() > ACC_MAX:
            raise ValueError(f"layer {index}: a bias does not fit int32 at these scales")
        kind = "conv2d" if isinstance(layer, Conv2D) else "dense"
        quantized.append(QuantizedLayer(
            kind=kind, weights=w_q.astype(np.int8), bias=bias.astype(np.int64),
            multiplier=np.array([p[0] for p in pairs], np.int64),
            shift=np.array([p[1] for p in pairs], np.int64),
            input_scale=in_scale, input_zero_point=in_zero,
            output_scale=out_scale, output_zero_point=out_zero, relu=bool(layer.relu),
            input_shape=shapes[index], output_shape=shapes[index + 1],
            kernel=tuple(np.shape(layer.weights)[:2]) if kind == "conv2d" else (1, 1),
            stride=getattr(layer, "stride", 1), padding=getattr(layer, "padding", 0)))
        x = out
        in_scale, in_zero = out_scale, out_zero
    return QuantizedModel(quantized, input_shape=shapes[0], input_scale=model_in[0],
                          input_zero_point=model_in[1])


def quantize_mlp(layers, calibration_x, *, per_channel=True):
    """An int8 model of a multi-layer perceptron given as ``(W, b)`` pairs (for example a
    scikit-learn ``MLPClassifier``'s ``zip(coefs_, intercepts_)``): ReLU after every layer
    but the last. See :func:`quantize`."""
    pairs = list(layers)
    if not pairs:
        raise ValueError("layers must hold at least one (W, b) pair")
    dense = []
    for index, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise TypeError(f"layer {index} must be a (W, b) pair")
        dense.append(Dense(pair[0], pair[1], relu=index < len(pairs) - 1))
    return quantize(dense, calibration_x, per_channel=per_channel)
