"""Damaged and hostile TFLite files, against LiteRT: the contract tpuer keeps for a model
file it did not write.

For every model LiteRT's interpreter (reference kernels) runs, tpuer gives its output bit
for bit or refuses it with a :class:`~tpuer.tflite_model.TFLiteError` saying why; a model
LiteRT refuses, tpuer refuses; never another exception, a hang or a runaway allocation.

:func:`mutants` makes damaged copies of a model: byte flips, truncations, and changes to
the flatbuffer's own fields (tensor shapes, buffer and operator-code indices, operator
inputs and outputs, quantisation scales, zero points and axes, operator options, constant
data), each with a description. :func:`verdicts` runs tpuer and LiteRT on one of them,
each in a worker process of its own with a time and memory bound (LiteRT is C++: a file
may crash it), and :func:`judge` says whether the two keep the contract. ``make fuzz``
and ``tests/test_tflite_fuzz.py`` run it.
"""

import concurrent.futures
import resource
import struct
from dataclasses import dataclass

import numpy as np

__all__ = ["Mutant", "mutants", "verdicts", "judge", "Verdict", "Workers", "campaign"]

#: The address space of a worker process: a model that asks for more fails to allocate.
WORKER_MEMORY = 4 << 30
#: Seconds a worker may take for one model.
WORKER_SECONDS = 20


@dataclass(frozen=True)
class Mutant:
    """A damaged copy of a model: its ``data``, what was done (``what``), and its
    ``changes`` one by one (``(description, position, bytes written)``; none for a
    truncation), so that a breach can be shrunk to one of them."""
    data: bytes
    what: str
    changes: tuple = ()


@dataclass(frozen=True)
class Verdict:
    """What one side made of a model: ``ran`` with ``output``, or refused (``error``: the
    exception's type and message); ``crashed`` if its process died or hung."""
    ran: bool
    output: np.ndarray | None = None
    error: str = ""
    crashed: bool = False
    #: no verdict could be had (LiteRT's Python wrapper failed around its interpreter)
    unjudged: bool = False


# --- mutations -------------------------------------------------------------------------

def _fields(data):
    """Byte positions of the flatbuffer's fields tpuer and LiteRT read: ``(kind, position,
    format, name)``, ``format`` a :mod:`struct` code."""
    import tflite
    model = tflite.Model.GetRootAsModel(data, 0)
    found = []

    def scalar(table, slot, fmt, name):
        offset = table._tab.Offset(4 + 2 * slot)
        if offset:
            found.append(("scalar", table._tab.Pos + offset, fmt, name))

    def vector(table, slot, fmt, name, limit=64):
        offset = table._tab.Offset(4 + 2 * slot)
        if offset:
            start = table._tab.Vector(offset)
            for k in range(min(table._tab.VectorLen(offset), limit)):
                found.append(("vector", start + k * struct.calcsize(fmt), fmt,
                              f"{name}[{k}]"))

    for g in range(model.SubgraphsLength()):
        graph = model.Subgraphs(g)
        vector(graph, 1, "<i", "subgraph inputs")
        vector(graph, 2, "<i", "subgraph outputs")
        for t in range(graph.TensorsLength()):
            tensor = graph.Tensors(t)
            vector(tensor, 0, "<i", f"tensor {t} shape")
            scalar(tensor, 1, "<b", f"tensor {t} type")
            scalar(tensor, 2, "<I", f"tensor {t} buffer")
            q = tensor.Quantization()
            if q is not None:
                vector(q, 2, "<f", f"tensor {t} scale")
                vector(q, 3, "<q", f"tensor {t} zero point")
                scalar(q, 6, "<i", f"tensor {t} quantized dimension")
        for o in range(graph.OperatorsLength()):
            op = graph.Operators(o)
            scalar(op, 0, "<I", f"operator {o} opcode index")
            vector(op, 1, "<i", f"operator {o} inputs")
            vector(op, 2, "<i", f"operator {o} outputs")
            options = op.BuiltinOptions()
            if options is not None:
                table = type("Options", (), {})()
                table._tab = __import__("flatbuffers").table.Table(options.Bytes, options.Pos)
                for slot in range(8):
                    for fmt in ("<b", "<i"):
                        scalar(table, slot, fmt, f"operator {o} option {slot}")
    for c in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(c)
        scalar(code, 0, "<b", f"operator code {c} deprecated builtin")
        scalar(code, 3, "<i", f"operator code {c} builtin")
    for b in range(model.BuffersLength()):
        vector(model.Buffers(b), 0, "<B", f"buffer {b} data", limit=16)
    return found


_INTERESTING = {"<i": [-1, 0, 1, 2, 3, 7, 255, 1 << 15, 1 << 20, 1 << 31 - 1, -(1 << 31)],
                "<I": [0, 1, 2, 5, 100, 1 << 20, 0xFFFFFFFF],
                "<b": [-1, 0, 1, 2, 3, 5, 6, 9, 17, 127, -128],
                "<B": [0, 1, 127, 128, 255],
                "<q": [-129, -128, -1, 1, 127, 128, 13_369_344, 1 << 40, -(1 << 62)],
                "<f": [0.0, -1.0, 1e-30, 1e30, float("inf"), float("nan"), 1e-45, 3.0]}


def mutants(data, rng, count):
    """``count`` damaged copies of the model ``data`` (bytes), drawn with ``rng`` (a NumPy
    generator): a third byte flips or truncations, two thirds field changes."""
    fields = _fields(data)
    made = []
    for _ in range(count):
        kind = rng.random()
        out = bytearray(data)
        changes = []
        if kind < 0.25 or not fields:
            picks = sorted(int(p) for p in rng.integers(0, len(data), int(rng.integers(1, 6))))
            for p in picks:
                out[p] = int(rng.integers(0, 256))
                changes.append((f"byte {p} = {out[p]}", p, bytes(out[p:p + 1])))
            what = f"bytes {picks} set at random"
        elif kind < 0.33:
            cut = int(rng.integers(8, len(data)))
            out = out[:cut]
            what = f"truncated to {cut} bytes"
        else:
            for _ in range(int(rng.integers(1, 3))):
                _, position, fmt, name = fields[int(rng.integers(len(fields)))]
                choices = _INTERESTING[fmt]
                value = choices[int(rng.integers(len(choices)))]
                if fmt in ("<i", "<I", "<b", "<B", "<q") and rng.random() < 0.3:
                    old = struct.unpack_from(fmt, data, position)[0]
                    value = old + int(rng.choice([-1, 1]))
                try:
                    written = struct.pack(fmt, value)
                except struct.error:
                    continue
                out[position:position + len(written)] = written
                changes.append((f"{name} = {value}", position, written))
            what = ", ".join(description for description, _, _ in changes) or "unchanged"
        made.append(Mutant(bytes(out), what, tuple(changes)))
    return made


def campaign(data, rng, count, workers):
    """Run ``count`` mutants of model ``data`` through tpuer and LiteRT (``workers``:
    :class:`Workers`); return ``(outcomes, breaches)``: a count of each pair of outcomes,
    and each breach of the contract, shrunk to the one change that breaks it where one
    alone does."""
    outcomes, breaches = {}, []
    for mutant in mutants(data, rng, count):
        litert, mine = verdicts(workers, mutant.data)
        key = ("LiteRT " + ("failed" if litert.crashed or litert.unjudged else
                            "ran" if litert.ran else "refused"),
               "tpuer " + ("ran" if mine.ran else "refused"))
        outcomes[key] = outcomes.get(key, 0) + 1
        reason = judge(litert, mine)
        if reason is not None:
            breaches.append(f"{_shrink(data, mutant, workers) or mutant.what}: {reason}")
    return outcomes, breaches


def _shrink(data, mutant, workers):
    """The one change of ``mutant`` that breaks the contract alone, or ``None``."""
    if len(mutant.changes) < 2:
        return None
    for description, position, written in mutant.changes:
        alone = bytearray(data)
        alone[position:position + len(written)] = written
        if judge(*verdicts(workers, bytes(alone))) is not None:
            return f"{description} (alone; with: {mutant.what})"
    return None


# --- the two sides, each in a worker ---------------------------------------------------

def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))


def _input_for(data, seed):
    """An input for the model in ``data`` of the shape and dtype LiteRT reads from it."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType
    interpreter = Interpreter(model_content=data,
                              experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    detail = interpreter.get_input_details()[0]
    rng = np.random.default_rng(seed)
    dtype, shape = np.dtype(detail["dtype"]), tuple(int(d) for d in detail["shape"])
    if dtype.kind == "f":
        return rng.uniform(-1, 1, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, int(info.max) + 1, shape).astype(dtype)


def _litert(data, seed):
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
        x = _input_for(data, seed)
        interpreter = Interpreter(model_content=data,
                                  experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
        interpreter.allocate_tensors()
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
        interpreter.invoke()
        output = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
        return Verdict(True, output=np.array(output)), x
    except (UnicodeDecodeError, MemoryError) as error:
        # LiteRT's Python side (a tensor's name, an input this process cannot hold), not
        # its interpreter: no verdict
        return Verdict(False, error=f"{type(error).__name__}: {error}", unjudged=True), None
    except Exception as error:           # LiteRT refuses in many ways; each is a refusal
        return Verdict(False, error=f"{type(error).__name__}: {error}"), None


def _tpuer(data, x):
    import tpuer
    from tpuer.tflite_model import TFLiteError
    try:
        model = tpuer.from_tflite(data)
        if x is None:       # LiteRT gave no input: the model's own, with the same rule
            rng = np.random.default_rng(0)
            dtype = np.dtype(model.input.dtype)
            shape = (1, *model.input_shape)
            x = (rng.uniform(-1, 1, shape).astype(dtype) if dtype.kind == "f" else
                 rng.integers(-128, 128, shape).astype(dtype))
        output = tpuer.Device(backend="golden").run(model, x, progress=False)
        return Verdict(True, output=np.asarray(output))
    except (TFLiteError, tpuer.CycleBudgetError) as error:   # a clear refusal
        return Verdict(False, error=f"{type(error).__name__}: {error}")
    except Exception as error:           # kept as the contract's breach it is
        return Verdict(False, error=f"{type(error).__name__}: {error}", crashed=True)


def _worker_pool():
    return concurrent.futures.ProcessPoolExecutor(max_workers=1, initializer=_limit_memory)


class Workers:
    """Two worker processes (LiteRT, tpuer), made again when one dies or hangs."""

    def __init__(self):
        self._pools = {"litert": _worker_pool(), "tpuer": _worker_pool()}

    def call(self, side, function, *args):
        try:
            return self._pools[side].submit(function, *args).result(timeout=WORKER_SECONDS)
        except (concurrent.futures.process.BrokenProcessPool,
                concurrent.futures.TimeoutError) as error:
            self._restart(side)
            return Verdict(False, error=f"its process died or hung ({type(error).__name__})",
                           crashed=True)

    def _restart(self, side):
        pool = self._pools[side]
        for process in list(getattr(pool, "_processes", {}).values()):
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        self._pools[side] = _worker_pool()

    def close(self):
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)


def verdicts(workers, data, seed=0):
    """(LiteRT's :class:`Verdict`, tpuer's) on the model in ``data``, the same input for
    both."""
    result = workers.call("litert", _litert, data, seed)
    if isinstance(result, Verdict):          # LiteRT's process died
        litert, x = result, None
    else:
        litert, x = result
    return litert, workers.call("tpuer", _tpuer, data, x)


def judge(litert, mine):
    """The contract broken by this pair of verdicts, as a short reason, or ``None``."""
    if mine.crashed:
        return f"tpuer failed inside: {mine.error}"
    if not mine.ran and not mine.error.startswith(("TFLiteError", "CycleBudgetError")):
        return f"tpuer raised {mine.error}"
    if litert.ran and mine.ran:
        same = (litert.output.shape == mine.output.shape and
                litert.output.dtype == mine.output.dtype and
                np.array_equal(litert.output, mine.output))
        return None if same else "both ran, outputs differ"
    if litert.unjudged or litert.crashed:     # no oracle: LiteRT itself failed
        return None
    if not litert.ran and mine.ran:
        return f"LiteRT refuses ({litert.error[:120]}), tpuer runs it"
    return None
