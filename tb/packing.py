"""Turn Python values into the bits of an Amaranth layout and back.

Port payloads (``rows__payload`` and the like) are flat bit vectors in Verilog; the
layouts that define them live in the RTL classes, so the testbenches pack with those very
layouts and never restate a field position.
"""

import numpy as np
from amaranth.hdl import Shape
from amaranth.lib import data

__all__ = ["Codec"]


class Codec:
    """Encoder and decoder for one shape or layout.

    * an integer shape packs an ``int``;
    * an :class:`ArrayLayout` packs a sequence (decoded as an ``int64`` NumPy array when its
      elements are integers, else as a list);
    * a :class:`StructLayout` packs a mapping of field names (missing fields are 0) and
      decodes to a ``dict``.
    """

    def __init__(self, shape):
        self.shape = shape
        if isinstance(shape, data.ArrayLayout):
            self.kind = "array"
            self.elem = Codec(shape.elem_shape)
            self.length = shape.length
            self.stride = Shape.cast(shape.elem_shape).width
            # Whole-byte integer lanes pack through NumPy, a few times faster per vector.
            self.dtype = None
            if self.elem.kind == "int" and self.stride in (8, 16, 32, 64):
                self.dtype = np.dtype(f"<{'i' if self.elem.signed else 'u'}{self.stride // 8}")
        elif isinstance(shape, data.StructLayout):
            self.kind = "struct"
            self.fields = [(name, field.offset, Codec(field.shape)) for name, field in shape]
        else:
            self.kind = "int"
            shape = Shape.cast(shape)
            self.signed = shape.signed
        self.width = Shape.cast(shape).width
        self.mask = (1 << self.width) - 1

    def encode(self, value):
        if self.kind == "int":
            value = int(value)
            low = -(1 << (self.width - 1)) if self.signed else 0
            high = low + self.mask
            if not low <= value <= high:
                raise ValueError(f"{value} does not fit {self.width}-bit "
                                 f"{'signed' if self.signed else 'unsigned'}")
            return value & self.mask
        if self.kind == "array":
            if len(value) != self.length:
                raise ValueError(f"expected {self.length} elements, got {len(value)}")
            if self.dtype is not None:
                lanes = np.asarray(value, dtype=np.int64)
                info = np.iinfo(self.dtype)
                if lanes.size and (lanes.min() < info.min or lanes.max() > info.max):
                    bad = lanes[(lanes < info.min) | (lanes > info.max)][0]
                    raise ValueError(f"{bad} does not fit {self.stride}-bit "
                                     f"{'signed' if self.elem.signed else 'unsigned'}")
                return int.from_bytes(lanes.astype(self.dtype).tobytes(), "little")
            bits = 0
            for index, item in enumerate(value):
                bits |= self.elem.encode(item) << (index * self.stride)
            return bits
        bits = 0
        for name, offset, codec in self.fields:
            if name in value:
                bits |= codec.encode(value[name]) << offset
        unknown = set(value) - {name for name, _, _ in self.fields}
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}")
        return bits

    def decode(self, bits):
        bits = int(bits) & self.mask
        if self.kind == "int":
            if self.signed and bits >> (self.width - 1):
                return bits - (1 << self.width)
            return bits
        if self.kind == "array":
            if self.dtype is not None:
                raw = bits.to_bytes(self.length * self.stride // 8, "little")
                return np.frombuffer(raw, dtype=self.dtype).astype(np.int64)
            items = [self.elem.decode(bits >> (index * self.stride))
                     for index in range(self.length)]
            return np.array(items, dtype=np.int64) if self.elem.kind == "int" else items
        return {name: codec.decode(bits >> offset) for name, offset, codec in self.fields}
