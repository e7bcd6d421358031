"""The cycle model's rates: with memory_read_latency 2 the memories' reads take a cycle
more, but the matrix unit's feed and the host's reads still stream a row per cycle. (The
model itself is checked against the RTL, counter for counter, by the core's benches.)"""

import numpy as np
import pytest

from tpuer import Config
from tpuer.assembler import assemble
from tpuer.sim.isa_model import CoreModel

PROGRAMS = {
    "matmul": "read_weights 0, 1\n matmul 0, 0, {n}, switch\n halt",
    "write_host_ub": "write_host 0, {n}\n halt",
    "write_host_acc": "write_host 0, {n}, from_acc\n halt",
}


def _cycles(cfg, program, n):
    core = CoreModel(cfg)
    core.load_weights(0, np.zeros((1, cfg.rows, cfg.cols), dtype=np.int64))
    core.load_program(assemble(program.format(n=n)))
    return core.run().cycles


@pytest.mark.parametrize("name", list(PROGRAMS))
@pytest.mark.parametrize("host_read_queue", [1, 2])
def test_the_slower_reads_cost_a_few_cycles_per_instruction_not_per_row(name,
                                                                           host_read_queue):
    base = Config(rows=4, cols=4, ub_depth=64, acc_depth=64, host_read_queue=host_read_queue)
    fast = Config(rows=4, cols=4, ub_depth=64, acc_depth=64, host_read_queue=host_read_queue,
                  memory_read_latency=2)
    program = PROGRAMS[name]
    extra = [_cycles(fast, program, n) - _cycles(base, program, n) for n in (8, 32)]
    if host_read_queue == 2 or name == "matmul":
        assert 0 < extra[0] <= 3 and extra[1] == extra[0], extra
    else:       # a one-row queue answers every other cycle; two slots more answer faster
        assert extra[1] < extra[0] <= 3, extra
