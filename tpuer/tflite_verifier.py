"""The structural check LiteRT makes of a TFLite file before it reads anything: flatbuffers'
own verifier, over every table, vector and string of the TFLite schema.

LiteRT refuses a file its verifier rejects, whichever field is damaged, one tpuer reads or
not; so :func:`verify` makes the same checks, with the verifier's rules (every offset
inside the buffer and aligned, vtables sane, vectors and strings inside the buffer,
strings ending in a zero byte, at most 64 tables deep and 10^6 tables, a buffer under
2 GiB). The schema is not written out here: it is read from the ``tflite`` package's
classes (its generated accessors name each field's slot and how it is stored), so it is
the schema the package was generated from.
"""

import functools
import inspect
import re
import struct

__all__ = ["verify", "FlatbufferError"]

#: flatbuffers' limits (``FLATBUFFERS_MAX_BUFFER_SIZE``, the Verifier's defaults)
MAX_BUFFER_SIZE = (1 << 31) - 1
MAX_DEPTH = 64
MAX_TABLES = 1_000_000

_SIZES = {"Bool": 1, "Uint8": 1, "Int8": 1, "Uint16": 2, "Int16": 2, "Uint32": 4,
          "Int32": 4, "Float32": 4, "Uint64": 8, "Int64": 8, "Float64": 8}
#: A union accessor whose type enum is not named after it.
_UNION_ENUMS = {"Details": "QuantizationDetails", "ArraySegments": "SparseIndexVector",
                "ArrayIndices": "SparseIndexVector"}


class FlatbufferError(ValueError):
    """The file breaks a rule of flatbuffers' verifier; the message says where."""


@functools.lru_cache(maxsize=None)
def _fields(name):
    """The fields of table ``name`` of the ``tflite`` package: ``(slot, kind, detail,
    field)``, ``kind`` one of scalar (detail: size), string, table (detail: its name),
    vector (detail: element size), tables, strings, union (detail: the type enum)."""
    import tflite
    cls = getattr(tflite, name)
    found = {}
    for method_name, method in vars(cls).items():
        if method_name.startswith("_") or not callable(method):
            continue
        try:
            source = inspect.getsource(method)
        except (OSError, TypeError):
            continue
        slot = re.search(r"self\._tab\.Offset\((\d+)\)", source)
        if slot is None:
            continue
        slot = int(slot.group(1))
        kind = _kind(source, method_name)
        if kind is None:
            continue
        # the accessor that reads one element says most (AsNumpy, Length, IsNone don't)
        if slot not in found or found[slot][0] in ("vector?", None):
            found[slot] = (*kind, method_name)
    return tuple(sorted((slot, *entry) for slot, entry in found.items()
                        if entry[0] != "vector?"))


def _kind(source, method_name):
    flags = re.search(r"number_types\.(\w+)Flags", source.replace("UOffsetTFlags", ""))
    size = _SIZES.get(flags.group(1)) if flags else None
    table = re.search(r"obj = (\w+)\(\)", source)
    if "self._tab.Union(" in source:
        return "union", _UNION_ENUMS.get(method_name, method_name)
    if "self._tab.Vector(o)" in source:
        if "self._tab.Indirect(x)" in source and table:
            return "tables", table.group(1)
        if "self._tab.String(" in source:
            return "strings", None
        if size and "(j" in source:
            return "vector", size
        return "vector?", None
    if "self._tab.String(o + self._tab.Pos)" in source:
        return "string", None
    if "self._tab.Indirect(o + self._tab.Pos)" in source and table:
        return "table", table.group(1)
    if size and "o + self._tab.Pos" in source:
        return "scalar", size
    return None


@functools.lru_cache(maxsize=None)
def _union_members(enum_name):
    """Type value -> table name of a union's type enum."""
    import tflite
    enum = getattr(tflite, enum_name)
    return {value: name for name, value in vars(enum).items()
            if not name.startswith("_") and isinstance(value, int) and name != "NONE"
            and hasattr(tflite, name)}


class _Verifier:
    def __init__(self, data):
        self.data = data
        self.size = len(data)
        self.depth = 0
        self.tables = 0

    def check(self, holds, rule, where):
        if not holds:
            raise FlatbufferError(f"{where}: {rule}")

    def inside(self, position, length, where):
        self.check(length < self.size and 0 <= position <= self.size - length,
                   f"{length} bytes at {position} are not inside the file", where)

    def scalar(self, position, size, where):
        self.check(position % size == 0, f"a {size}-byte value at {position} is not aligned",
                   where)
        self.inside(position, size, where)

    def read(self, fmt, position):
        return struct.unpack_from(fmt, self.data, position)[0]

    def offset(self, position, where):
        """The position an offset at ``position`` points to."""
        self.scalar(position, 4, where)
        value = self.read("<I", position)
        self.check(value != 0, "an offset is 0", where)
        self.check(value < 1 << 31, "an offset is negative", where)
        self.inside(position + value, 1, where)
        return position + value

    def vector(self, position, element, where):
        """Checks a vector (or string) of ``element``-byte elements; returns its length."""
        self.scalar(position, 4, where)
        length = self.read("<I", position)
        self.check(length < MAX_BUFFER_SIZE // element, "a vector is too long", where)
        self.inside(position, 4 + element * length, where)
        return length

    def string(self, position, where):
        length = self.vector(position, 1, where)
        end = position + 4 + length
        self.inside(end, 1, where)
        self.check(self.data[end] == 0, "a string does not end in a zero byte", where)

    def table(self, position, name, where):
        self.scalar(position, 4, where)
        vtable = position - self.read("<i", position)
        self.depth += 1
        self.tables += 1
        self.check(self.depth <= MAX_DEPTH and self.tables <= MAX_TABLES,
                   "tables nest too deep or are too many", where)
        self.check(vtable >= 0, "a table's vtable is outside the file", where)
        self.scalar(vtable, 2, where)
        vtable_size = self.read("<H", vtable)
        self.check(vtable_size % 2 == 0, "a vtable's size is odd", where)
        self.inside(vtable, vtable_size, where)
        types = {}
        for slot, kind, detail, field in _fields(name):
            if slot >= vtable_size:
                continue
            relative = self.read("<H", vtable + slot)
            if not relative:
                continue
            at = position + relative
            here = f"{where}.{field}"
            if kind == "scalar":
                self.scalar(at, detail, here)
                if field.endswith("Type"):
                    types[field[:-4]] = self.read("<B", at)
                continue
            target = self.offset(at, here)
            if kind == "string":
                self.string(target, here)
            elif kind == "table":
                self.table(target, detail, here)
            elif kind == "vector":
                self.vector(target, detail, here)
            elif kind in ("tables", "strings"):
                for k in range(self.vector(target, 4, here)):
                    element = self.offset(target + 4 + 4 * k, f"{here}[{k}]")
                    if kind == "tables":
                        self.table(element, detail, f"{here}[{k}]")
                    else:
                        self.string(element, f"{here}[{k}]")
            elif kind == "union":
                member = _union_members(detail).get(types.get(field, self._type(
                    name, field, position, vtable, vtable_size)))
                if member is not None:
                    self.table(target, member, f"{here}<{member}>")
        self.depth -= 1

    def _type(self, name, field, position, vtable, vtable_size):
        """A union's type, when its type field comes after it in slot order."""
        for slot, kind, _, other in _fields(name):
            if other == f"{field}Type" and slot < vtable_size:
                relative = self.read("<H", vtable + slot)
                return self.read("<B", position + relative) if relative else 0
        return 0


def verify(data):
    """Check ``data`` (a TFLite file's bytes) as flatbuffers' verifier checks it, with the
    TFLite schema; raise :class:`FlatbufferError` at the first broken rule."""
    verifier = _Verifier(bytes(data))
    where = "the file"
    verifier.check(8 <= len(data) < MAX_BUFFER_SIZE, "its size is out of range", where)
    root = verifier.offset(0, where)
    verifier.table(root, "Model", "Model")
