"""The host command set's Python side: encoders and the reply decoder."""

import numpy as np
import pytest

from tpuer import Config, isa
from tpuer.isa import CoreState, ErrorCode
from tpuer.protocol import (STATUS_FIELDS, STATUS_STATE_LAYOUT, STATUS_WORDS, Command, Memory,
                            Reply, decode_replies, encode, header)


def test_commands_have_their_documented_words():
    cfg = Config(rows=4, cols=6)
    program = encode.write_program(3, [isa.halt()])
    assert program == [(Command.WRITE_PROGRAM.value << 24) | 1, 3, isa.halt().encode(), 0]
    weights = encode.write_weights(cfg, 5, [[1, -1, 2, -2, 127, -128]])
    assert weights == [(Command.WRITE_WEIGHTS.value << 24) | 1, 5,
                       0xFE02FF01, 0x0000807F]          # lane 0 in the low byte
    assert encode.data(cfg, [np.arange(6) - 3])[0] == (Command.DATA.value << 24) | 1
    with pytest.raises(ValueError, match="int8 lanes"):
        encode.data(cfg, [[200, 0, 0, 0, 0, 0]])
    with pytest.raises(ValueError, match="24 bits"):
        header(Command.DATA, 1 << 24)


def test_replies_decode_and_an_unfinished_one_is_kept():
    words = [(Reply.ROW.value << 24) | 2, 5, 0xFFFFFFFF,
             (Reply.BAD_COMMAND.value << 24) | 0x77,
             (Reply.STATUS.value << 24) | 6, 2 | (0 << 8), 0, 100, 40, 3, 9,
             (Reply.ROW.value << 24) | 2, 1]
    replies, rest = decode_replies(words)
    assert replies[0][0] == "row" and replies[0][1].tolist() == [5, -1]
    assert replies[1] == ("bad_command", 0x77)
    status = replies[2][1]
    assert status["state"] is CoreState.HALTED and status["error"] is ErrorCode.NONE
    assert (status["cycles"], status["instructions"]) == (100, 9)
    assert rest == [(Reply.ROW.value << 24) | 2, 1]
    with pytest.raises(ValueError, match="not a reply header"):
        decode_replies([0x12345678])


def test_a_status_reply_is_read_by_its_layout():
    """The state word's fields sit where ``STATUS_STATE_LAYOUT`` puts them, and the other
    words are read in the order of ``STATUS_FIELDS`` (the order the hardware sends)."""
    word = (int(CoreState.ERROR.value) << STATUS_STATE_LAYOUT["state"].offset |
            int(ErrorCode.NO_WEIGHTS.value) << STATUS_STATE_LAYOUT["error"].offset)
    body = [word, 17, 1000, 400, 30, 12]
    (kind, status), = decode_replies([(Reply.STATUS.value << 24) | STATUS_WORDS, *body])[0]
    assert kind == "status" and len(body) == STATUS_WORDS == len(STATUS_FIELDS)
    assert (status["state"], status["error"]) == (CoreState.ERROR, ErrorCode.NO_WEIGHTS)
    assert {name: status[name] for name in STATUS_FIELDS[1:]} == dict(zip(STATUS_FIELDS[1:],
                                                                          body[1:]))
    assert STATUS_STATE_LAYOUT["error"].offset == 8        # the documented "error << 8"


def test_memory_commands_have_their_documented_words():
    cfg = Config(rows=4, cols=4)
    assert encode.read_memory(Memory.ACCUMULATORS, 5, 3) == [
        (Command.READ_MEMORY.value << 24) | 3, 5 | (1 << 16)]
    words = encode.write_memory(cfg, 2, [[1, -1, 2, -2]])
    assert words == [(Command.WRITE_MEMORY.value << 24) | 1, 2, 0xFE02FF01]
    with pytest.raises(ValueError, match="16 bits"):
        encode.read_memory(Memory.UNIFIED_BUFFER, 1 << 16, 1)
    with pytest.raises(ValueError):
        encode.read_memory(7, 0, 1)
    replies, rest = decode_replies([(Reply.REFUSED.value << 24) | Command.READ_MEMORY.value])
    assert replies == [("refused", Command.READ_MEMORY.value)] and rest == []


def test_the_model_refuses_what_the_host_interface_refuses():
    from tpuer.sim.isa_model import CoreModel
    cfg = Config(rows=4, cols=4, ub_depth=16, acc_depth=8)
    model = CoreModel(cfg)
    assert model.memory_access_error(False, 0, 16) is None
    assert "outside the Unified Buffer of 16 rows" in model.memory_access_error(False, 15, 2)
    assert "outside the accumulators of 8 rows" in model.memory_access_error(True, 8, 1)
    assert "only the Unified Buffer" in model.memory_access_error(True, 0, 1, write=True)
    model.write_memory(3, [[1, 2, 3, 4]])
    assert model.read_memory(False, 3, 1)[0].tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="outside"):
        model.read_memory(True, 7, 2)
    with pytest.raises(ValueError, match="must lie in"):
        model.write_memory(0, [[300, 0, 0, 0]])
