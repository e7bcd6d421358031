"""Damaged and hostile TFLite files: each rule of the validation pass and of flatbuffers'
verifier refuses its damage with a ``TFLiteError`` that names the part and the rule; what
fuzzing found against LiteRT stays fixed; and a short fuzz run with a fresh seed keeps the
contract (LiteRT's output or a clear refusal; ``make fuzz-tflite`` runs the long one)."""

import struct
from pathlib import Path

import numpy as np
import pytest

import tpuer
from tpuer.tflite_fuzz import _fields
from tpuer.tflite_model import TFLiteError, from_tflite, litert_output
from tpuer.tflite_verifier import FlatbufferError, verify

from conftest import seed as suite_seed

MODELS = Path(__file__).parent / "data" / "tflite"
ALL_MODELS = [Path(tpuer.__file__).parent / "data" / "digits_cnn.tflite",
              *sorted(MODELS.glob("*.tflite"))]


def changed(name, changes):
    """Model ``name`` with the flatbuffer fields ``changes`` ({field: value}) set."""
    data = bytearray((MODELS / f"{name}.tflite").read_bytes())
    positions = {field: (position, fmt) for _, position, fmt, field in _fields(bytes(data))}
    for field, value in changes.items():
        position, fmt = positions[field]
        struct.pack_into(fmt, data, position, value)
    return bytes(data)


@pytest.mark.parametrize("changes, message", [
    ({"tensor 7 shape[1]": -3}, r"tensor 7 .*negative size"),
    ({"tensor 7 shape[1]": 1 << 30}, r"tensor 7 .*at most 134,217,728"),
    ({"tensor 2 shape[1]": 10}, r"tensor 2 .*buffer holds 63 values, its shape \(7, 10\) 70"),
    ({"tensor 2 buffer": 4000}, r"tensor 2: its buffer index 4000 is out of range"),
    ({"tensor 2 type": 77}, r"tensor 2: its type 77 is not a TFLite type"),
    ({"tensor 2 scale[3]": -0.5}, r"tensor 2 .*scales must be positive and finite"),
    ({"tensor 2 scale[3]": float("nan")}, r"tensor 2 .*scales must be positive and finite"),
    ({"tensor 7 zero point[0]": 300}, r"tensor 7 .*must be in \[-128, 127\], not 300"),
    ({"tensor 2 zero point[3]": 5}, r"operator 2 \(FULLY_CONNECTED\): its int8 weights .*"
                                    r"symmetrically"),
    ({"operator 0 inputs[1]": 99}, r"operator 0 \(FULLY_CONNECTED\): its input tensor index "
                                   r"99 is out of range"),
    ({"operator 0 outputs[0]": 0}, r"operator 0 \(FULLY_CONNECTED\): tensor 0 is both its "
                                   r"input and its output"),
    ({"subgraph outputs[0]": 40}, r"the subgraph's input or output is tensor 40"),
    ({"subgraph outputs[0]": 3}, r"the model's output, tensor 3, is computed by no operator"),
    ({"operator code 0 builtin": 250}, r"builtin operator code 250 is not one of TFLite's"),
])
def test_each_rule_refuses_its_damage_by_name(changes, message):
    with pytest.raises(TFLiteError, match=message):
        from_tflite(changed("dense", changes))


@pytest.mark.parametrize("name, changes, message", [
    ("conv", {"operator 7 opcode index": 9}, r"operator 7: its operator code index 9 is out "
                                             r"of range"),
    # the tflite package reads a code below 127 from the deprecated field; LiteRT takes the
    # larger of the two: here CONCATENATION (2) for AVERAGE_POOL_2D (1), which tpuer does
    # not run
    ("dilated", {"operator code 5 builtin": 2}, r"operator 8 \(CONCATENATION\) is not "
                                                r"supported"),
    # STRIDED_SLICE without its shrink mask: RESHAPE's new shape packs a vector and a scalar
    ("conv", {"operator 4 option 4": 0}, r"operator 5 \(PACK\): its inputs' values have "
                                         r"different shapes"),
])
def test_rules_of_operator_codes_and_shape_operators(name, changes, message):
    with pytest.raises(TFLiteError, match=message):
        from_tflite(changed(name, changes))


def test_a_per_channel_axis_must_be_an_axis_of_the_shape():
    from tpuer.tflite_model import TensorInfo, _validate_tensor
    tensor = TensorInfo(3, "w", (4, 2), np.int8, np.ones(4, np.float32), np.zeros(4, np.int64),
                        5, np.zeros(8, np.int8))
    with pytest.raises(TFLiteError, match=r"tensor 3 .*quantised dimension 5 is not an axis"):
        _validate_tensor(3, tensor)
    with pytest.raises(TFLiteError, match=r"4 scales along axis 1 of size 2"):
        _validate_tensor(3, TensorInfo(3, "w", (4, 2), np.int8, np.ones(4, np.float32),
                                       np.zeros(4, np.int64), 1, np.zeros(8, np.int8)))


def test_every_shipped_and_test_model_passes_the_verifier():
    for path in ALL_MODELS:
        verify(path.read_bytes())


@pytest.mark.parametrize("damage, message", [
    (lambda data: data[:200], r"not inside the file"),
    (lambda data: struct.pack("<I", 3) + data[4:], r"not aligned"),
    (lambda data: struct.pack("<I", len(data) + 8) + data[4:], r"not inside the file"),
    (lambda data: struct.pack("<I", 0) + data[4:], r"an offset is 0"),
])
def test_the_verifier_refuses_what_flatbuffers_refuses(damage, message):
    data = (MODELS / "dense.tflite").read_bytes()
    with pytest.raises(FlatbufferError, match=message):
        verify(damage(data))
    with pytest.raises(TFLiteError, match="damaged"):
        from_tflite(damage(data))


def test_a_string_without_its_zero_byte_is_refused():
    """A tensor's name whose terminating zero byte is overwritten: tpuer never reads past
    it, LiteRT's verifier refuses it, so does tpuer."""
    data = bytearray((MODELS / "dense.tflite").read_bytes())
    import tflite
    name = tflite.Model.GetRootAsModel(bytes(data), 0).Subgraphs(0).Tensors(0)
    position = name._tab.Offset(10) + name._tab.Pos
    start = position + struct.unpack_from("<I", data, position)[0]
    length = struct.unpack_from("<I", data, start)[0]
    data[start + 4 + length] = ord("x")
    with pytest.raises(TFLiteError, match="does not end in a zero byte"):
        from_tflite(bytes(data))


def test_a_signature_without_its_key_is_refused():
    """Found by fuzzing: byte 68 of float_io.tflite moves its SignatureDef's key out of the
    table's vtable; LiteRT refuses the file ("Missing exported method name"), so does
    tpuer."""
    data = bytearray((MODELS / "float_io.tflite").read_bytes())
    data[68] = 114
    with pytest.raises(TFLiteError, match="signature 0 has no key"):
        from_tflite(bytes(data))


def test_a_wrapping_accumulator_requantises_as_the_kernel():
    """FULLY_CONNECTED's bias near -2**31: the kernel's int32 accumulator wraps, and so must
    tpuer's host requantisation (it answered -128 where LiteRT answers 127)."""
    pytest.importorskip("ai_edge_litert")
    data = bytearray((MODELS / "dense.tflite").read_bytes())
    import tflite
    model = tflite.Model.GetRootAsModel(bytes(data), 0)
    bias = model.Subgraphs(0).Tensors(1)             # int32, 7 values
    buffer = model.Buffers(bias.Buffer())
    start = buffer._tab.Vector(buffer._tab.Offset(4))
    struct.pack_into("<i", data, start + 4 * 3, -(1 << 31) + 5)
    path = Path(pytest.importorskip("tempfile").mkdtemp()) / "bias.tflite"
    path.write_bytes(bytes(data))
    x = np.random.default_rng(suite_seed()).integers(-128, 128, (1, 20)).astype(np.int8)
    want = litert_output(path, x)
    loaded = from_tflite(bytes(data))
    assert np.array_equal(loaded.reference(x), want)
    assert np.array_equal(tpuer.Device().run(loaded, x, progress=False), want)


@pytest.mark.parametrize("path", ALL_MODELS, ids=lambda p: p.stem)
def test_a_short_fuzz_keeps_the_contract(path):
    """Damaged copies (a fresh seed each run), against LiteRT in worker processes: its
    output or a clear refusal, never an internal error, a crash or a hang."""
    pytest.importorskip("ai_edge_litert")
    from tpuer.tflite_fuzz import Workers, campaign
    workers = Workers()
    try:
        _, breaches = campaign(path.read_bytes(),
                               np.random.default_rng([suite_seed(), ALL_MODELS.index(path)]),
                               25, workers)
    finally:
        workers.close()
    assert not breaches, "\n".join(breaches)
