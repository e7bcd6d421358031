"""Assembler and disassembler of the TPU's instruction set (:mod:`tpuer.isa`).

The text format, one statement a line::

    ; a comment (so is everything after '#')
    TILE_ROWS = 8                   ; a constant
    start:                          ; a label: the index of the next instruction
        read_weights 0, 2
        read_host 0, 2 * TILE_ROWS
        matmul 0, 0, TILE_ROWS, switch
        matmul TILE_ROWS, 0, TILE_ROWS, switch, accumulate
        config multiplier, 0x40000000        ; every lane
        config shift, 6, 3                   ; lane 3 only
        activate 0, 32, TILE_ROWS
        write_host 32, TILE_ROWS
        halt
        .word 0x0000000000000001             ; a raw 64-bit instruction word

Mnemonics are the :class:`~tpuer.isa.Opcode` names, flags the names of its flags
(:class:`~tpuer.isa.MatmulFlag`, :class:`~tpuer.isa.WriteHostFlag`), the first operand of
``config`` a :class:`~tpuer.isa.ConfigParam` name, all in any case. Operands are integers
(``12``, ``-3``, ``0x1f``, ``0b101``), constants, labels, or sums, differences and
products of them. A program file (``.bin``) holds the 64-bit instruction words, little
endian, one after another. :func:`disassemble` gives text that assembles back to the very
same words, whatever they are.
"""

import ast
import re

from .isa import (ALL_LANES, DEFINED_FLAGS, OPERANDS, ConfigParam, Instruction, MatmulFlag, Opcode,
                  WriteHostFlag)

__all__ = ["AsmError", "assemble", "disassemble", "read_program", "write_program"]

_FLAG_ENUMS = {Opcode.MATMUL: MatmulFlag, Opcode.WRITE_HOST: WriteHostFlag}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")


class AsmError(ValueError):
    """A statement that does not assemble; the message names the file, line and problem."""


def _strip(line):
    for mark in (";", "#"):
        line = line.split(mark, 1)[0]
    return line.strip()


#: A bound on the magnitude of any value in an expression, far above any field (the
#: widest is 64 bits), so that ``A1 = A0 * A0`` repeated cannot grow forever.
VALUE_LIMIT = 1 << 128
#: The longest operand expression, in characters (a deeper one is not a program's).
EXPRESSION_LIMIT = 1000


def _evaluate(text, symbols, where):
    """The value of an operand expression: integers and names joined by + - *."""
    shown = text if len(text) <= 40 else text[:37] + "..."
    if len(text) > EXPRESSION_LIMIT:
        raise AsmError(f"{where}: the operand '{shown}' is longer than {EXPRESSION_LIMIT} "
                       f"characters")
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, RecursionError, MemoryError):
        raise AsmError(f"{where}: '{shown}' is not an operand") from None

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, int) \
                and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in symbols:
                raise AsmError(f"{where}: unknown name '{node.id}'")
            return symbols[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = value(node.operand)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            left, right = value(node.left), value(node.right)
            return {ast.Add: left + right, ast.Sub: left - right,
                    ast.Mult: left * right}[type(node.op)]
        raise AsmError(f"{where}: '{shown}' is not an operand (integers, names, + - * only)")

    def bounded(node):
        result = value(node)
        if abs(result) >= VALUE_LIMIT:
            raise AsmError(f"{where}: '{shown}' is {'-' if result < 0 else ''}2**"
                           f"{abs(result).bit_length() - 1} or more; no field holds a value "
                           f"of more than 64 bits")
        return result

    try:
        return bounded(tree)
    except RecursionError:
        raise AsmError(f"{where}: '{shown}' is nested too deeply") from None


def _statements(text, name):
    """(line number, label or None, statement) for every line that says something."""
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _strip(raw)
        while line:
            head, colon, rest = line.partition(":")
            if colon and _NAME.match(head.strip()):
                yield number, head.strip(), None
                line = rest.strip()
                continue
            yield number, None, line
            break


def assemble(text, name="<program>"):
    """The :class:`~tpuer.isa.Instruction` s of assembly ``text``; raises :class:`AsmError`
    naming ``name``, the line and the problem."""
    symbols = {}
    # Pass 1: labels and constants (a constant may use any label or earlier constant).
    index = 0
    body = []
    for number, label, statement in _statements(text, name):
        where = f"{name}:{number}"
        if label is not None:
            if label in symbols:
                raise AsmError(f"{where}: '{label}' is defined twice")
            symbols[label] = index
            continue
        if "=" in statement:
            left, right = (part.strip() for part in statement.split("=", 1))
            if not _NAME.match(left):
                raise AsmError(f"{where}: '{left}' is not a name")
            if left in symbols:
                raise AsmError(f"{where}: '{left}' is defined twice")
            body.append((where, ("constant", left, right)))
            symbols[left] = None        # defined, its value comes in order below
            continue
        body.append((where, ("instruction", statement, index)))
        index += 1
    # Pass 2: values in order, then instructions.
    program = []
    for where, item in body:
        if item[0] == "constant":
            _, left, right = item
            symbols[left] = _evaluate(right, {k: v for k, v in symbols.items() if v is not None},
                                      where)
    for where, item in body:
        if item[0] == "instruction":
            program.append(_instruction(item[1], symbols, where))
    return program


def _instruction(statement, symbols, where):
    mnemonic, rest = (statement.split(None, 1) + [""])[:2]   # any whitespace after it
    operands = [part.strip() for part in rest.split(",")] if rest.strip() else []
    if any(not part for part in operands):
        raise AsmError(f"{where}: an operand is missing in '{statement}'")
    mnemonic = mnemonic.strip().lower()
    if mnemonic == ".word":
        if len(operands) != 1:
            raise AsmError(f"{where}: .word takes one value")
        word = _evaluate(operands[0], symbols, where)
        try:
            return Instruction.decode(word)
        except ValueError as error:
            raise AsmError(f"{where}: {error}") from None
    try:
        op = Opcode[mnemonic.upper()]
    except KeyError:
        known = ", ".join(o.name.lower() for o in Opcode)
        raise AsmError(f"{where}: unknown instruction '{mnemonic}' (one of {known}, .word)") \
            from None
    if op is Opcode.CONFIG:
        return _config(operands, symbols, where)
    fields = OPERANDS[op]
    if len(operands) < len(fields):
        usage = " ".join([mnemonic, ", ".join(fields)])
        raise AsmError(f"{where}: {mnemonic} needs {len(fields)} operands ({usage}), "
                       f"got {len(operands)}")
    values = {field: _evaluate(text, symbols, where) for field, text in zip(fields, operands)}
    flags = 0
    enum = _FLAG_ENUMS.get(op)
    if enum is None and len(operands) > len(fields):
        raise AsmError(f"{where}: {mnemonic} takes {len(fields)} operands, got {len(operands)}")
    for text in operands[len(fields):]:
        if text.upper() not in enum.__members__:
            allowed = ", ".join(f.lower() for f in enum.__members__)
            raise AsmError(f"{where}: '{text}' is not a flag of {mnemonic} (flags: {allowed})")
        flags |= int(enum[text.upper()])
    try:
        return Instruction(op.value, flags=flags, **values)
    except ValueError as error:
        raise AsmError(f"{where}: {error}") from None


def _config(operands, symbols, where):
    if not 2 <= len(operands) <= 3:
        raise AsmError(f"{where}: config needs 2 or 3 operands (config PARAMETER, VALUE[, LANE])")
    try:
        param = ConfigParam[operands[0].upper()]
    except KeyError:
        known = ", ".join(p.name.lower() for p in ConfigParam)
        raise AsmError(f"{where}: '{operands[0]}' is not a parameter (one of {known})") from None
    value = _evaluate(operands[1], symbols, where)
    if not -(1 << 31) <= value < (1 << 32):
        raise AsmError(f"{where}: a config value must fit 32 bits, not {value}")
    lane = _evaluate(operands[2], symbols, where) if len(operands) == 3 else ALL_LANES
    if not 0 <= lane <= ALL_LANES:
        raise AsmError(f"{where}: lane must lie in [0, {ALL_LANES}], not {lane}")
    raw = value & 0xFFFFFFFF
    return Instruction(Opcode.CONFIG.value, a=raw & 0xFFFF, b=raw >> 16, count=lane,
                       flags=int(param))


def _canonical(instr):
    """The statement of one instruction, or ``None`` when only ``.word`` can say it."""
    op = instr.op
    if op is None or instr.reserved:
        return None
    if op is Opcode.CONFIG:
        if instr.flags > max(ConfigParam):
            return None
        text = f"config {ConfigParam(instr.flags).name.lower()}, {instr.value}"
        return text if instr.count == ALL_LANES else f"{text}, {instr.count}"
    fields = OPERANDS[op]
    unused = {"a", "b", "count"} - set(fields)
    if any(getattr(instr, field) for field in unused) or instr.flags & ~DEFINED_FLAGS.get(op, 0):
        return None
    parts = [str(getattr(instr, field)) for field in fields]
    enum = _FLAG_ENUMS.get(op)
    if enum is not None:
        parts += [flag.name.lower() for flag in enum if instr.flags & flag]
    name = op.name.lower()
    return f"{name} {', '.join(parts)}" if parts else name


def disassemble(program, *, addresses=True):
    """Assembly text for ``program`` (instructions or 64-bit words); words that are no
    valid statement come out as ``.word``, so the text assembles back to the same words."""
    lines = []
    for index, item in enumerate(program):
        instr = item if isinstance(item, Instruction) else Instruction.decode(item)
        text = _canonical(instr) or f".word {instr.encode():#018x}"
        lines.append(f"    {text:<40}; {index}" if addresses else f"    {text}")
    return "\n".join(lines) + "\n"


def write_program(path, program):
    """Write the instruction words to a ``.bin`` file (little endian, 8 bytes each)."""
    with open(path, "wb") as file:
        for item in program:
            word = item.encode() if isinstance(item, Instruction) else int(item)
            file.write(word.to_bytes(8, "little"))


def read_program(path):
    """The instructions of a ``.bin`` file."""
    raw = open(path, "rb").read()
    if len(raw) % 8:
        raise ValueError(f"{path}: {len(raw)} bytes is not a whole number of 8-byte "
                         f"instructions")
    return [Instruction.decode(int.from_bytes(raw[k:k + 8], "little"))
            for k in range(0, len(raw), 8)]
