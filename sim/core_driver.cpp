// The host side of the TPU core, in C++, for a Verilator model of it (Vtop, the core as
// top): loads weights and a program, runs it feeding every host row as soon as the core
// takes it and taking every row it sends, and reads the status and counters. Python calls
// it through ctypes (tpuer/sim/verilator_driver.py), so no Python runs per cycle.
//
// Each cycle is what the cocotb benches do (tpuer/tb/harness.py): drive the inputs, settle
// and sample the outputs, then the rising clock edge. Rows travel as packed bytes, lane 0 first,
// exactly the ports' bit layout on a little-endian machine.

#include <cstdint>
#include <cstring>
#include <vector>

#include "Vtop.h"
#include "verilated.h"

namespace {

template <class Port>
void put(Port& port, const void* source, size_t bytes) {
    Port value{};
    std::memcpy(&value, source, bytes);
    port = value;
}

template <class Port>
void take(const Port& port, void* target, size_t bytes) {
    std::memcpy(target, &port, bytes);
}

struct Core {
    VerilatedContext context;
    Vtop top{&context};
    std::vector<uint8_t> rows_out;  // the rows the last run sent

    // Settle the logic after the inputs changed: the clock goes low (no logic acts on
    // its falling edge) and the model evaluates.
    void settle() {
        top.clk = 0;
        top.eval();
    }
    // The rising edge (after settle()).
    void edge() {
        top.clk = 1;
        top.eval();
    }
    void tick() {
        settle();
        edge();
    }
    void idle_inputs() {
        top.control___05Fstart = 0;
        top.control___05Fabort = 0;
        top.program_write___05Fen = 0;
        top.weight_write___05Fen = 0;
        top.weight_write___05Farmed = 0;
        top.host_in___05Fvalid = 0;
        top.host_out___05Fready = 0;
        top.memory_request___05Fvalid = 0;
    }
};

void sample(const Vtop& top, int64_t* into, bool row_in, bool row_out) {
    into[0] = top.status___05Fcycles;
    into[1] = top.status___05Fmxu_busy_cycles;
    into[2] = top.status___05Fweight_stall_cycles;
    into[3] = top.status___05Finstructions;
    into[4] = row_in;
    into[5] = row_out;
}

}  // namespace

extern "C" {

// A core just out of reset (reset held for two clock edges).
void* tpuer_core_new() {
    Core* core = new Core;
    core->idle_inputs();
    core->top.rst = 1;
    core->tick();
    core->tick();
    core->top.rst = 0;
    return core;
}

void tpuer_core_free(void* handle) { delete static_cast<Core*>(handle); }

// Weight memory rows from row 0: `rows` rows of `row_bytes` bytes (cols int8 lanes).
void tpuer_core_load_weights(void* handle, const uint8_t* data, int64_t rows,
                             int64_t row_bytes) {
    Core& core = *static_cast<Core*>(handle);
    for (int64_t row = 0; row < rows; ++row) {
        core.top.weight_write___05Faddr = row;
        put(core.top.weight_write___05Fdata, data + row * row_bytes, row_bytes);
        core.top.weight_write___05Fen = 1;
        core.top.weight_write___05Farmed = 1;
        core.tick();
    }
    core.top.weight_write___05Fen = 0;
    core.top.weight_write___05Farmed = 0;
}

// Instruction words from address 0.
void tpuer_core_load_program(void* handle, const uint64_t* words, int64_t count) {
    Core& core = *static_cast<Core*>(handle);
    for (int64_t index = 0; index < count; ++index) {
        core.top.program_write___05Faddr = index;
        core.top.program_write___05Fdata = words[index];
        core.top.program_write___05Fen = 1;
        core.tick();
    }
    core.top.program_write___05Fen = 0;
}

// Rest `rest` cycles, START at `start_pc`, feed the `rows_in` host rows (`in_bytes` each),
// take every row sent (`out_bytes` each; tpuer_core_rows_out copies them), until the core
// stops running. `status` gets state, error, error_pc, cycles, MXU-busy cycles,
// weight-stall cycles, instructions and the samples taken. With `samples` (room for
// max_cycles + 1 of them), each cycle and then the end add a sample of 6 numbers: the four
// counters (cycles, MXU-busy, weight-stall, instructions), whether a host row came in and
// whether one went out.
// Returns the rows taken, or -1 if the core still ran after `max_cycles` cycles.
int64_t tpuer_core_run(void* handle, int64_t start_pc, const uint8_t* rows_in,
                       int64_t in_rows, int64_t in_bytes, int64_t out_bytes, int64_t rest,
                       int64_t max_cycles, int64_t* status, int64_t* samples) {
    Core& core = *static_cast<Core*>(handle);
    Vtop& top = core.top;
    for (int64_t cycle = 0; cycle < rest; ++cycle) core.tick();
    top.control___05Fstart_pc = start_pc;
    top.control___05Fstart = 1;
    core.tick();
    top.control___05Fstart = 0;
    int64_t sent = 0, taken = 0;
    core.rows_out.clear();
    bool offered = false, running = true;
    for (int64_t cycle = 0; running; ++cycle) {
        if (cycle == max_cycles) return -1;
        if (!offered && sent < in_rows) {
            put(top.host_in___05Fpayload, rows_in + sent * in_bytes, in_bytes);
            offered = true;
        }
        top.host_in___05Fvalid = offered;
        top.host_out___05Fready = 1;
        core.settle();
        bool row_in = offered && top.host_in___05Fready, row_out = top.host_out___05Fvalid;
        if (row_in) {
            offered = false;
            ++sent;
        }
        if (row_out) {
            core.rows_out.resize((taken + 1) * out_bytes);
            take(top.host_out___05Fpayload, core.rows_out.data() + taken * out_bytes,
                 out_bytes);
            ++taken;
        }
        running = top.status___05Fstate == 1;  // CoreState.RUNNING
        if (samples) sample(top, samples + 6 * cycle, row_in, row_out);
        core.edge();
        if (!running && samples) {
            core.settle();
            sample(top, samples + 6 * (cycle + 1), false, false);
            status[7] = cycle + 2;
        }
    }
    core.settle();  // the inputs stay as the last cycle drove them, as in the cocotb bench
    status[0] = top.status___05Fstate;
    status[1] = top.status___05Ferror;
    status[2] = top.status___05Ferror_pc;
    status[3] = top.status___05Fcycles;
    status[4] = top.status___05Fmxu_busy_cycles;
    status[5] = top.status___05Fweight_stall_cycles;
    status[6] = top.status___05Finstructions;
    core.tick();
    return taken;
}

// The rows the last run sent, into `target` (as many bytes as it returned rows times
// `out_bytes`).
void tpuer_core_rows_out(void* handle, uint8_t* target) {
    Core& core = *static_cast<Core*>(handle);
    std::memcpy(target, core.rows_out.data(), core.rows_out.size());
}

}  // extern "C"
