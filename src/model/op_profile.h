// LUMEN_PROFILE=1: where the time of decode steps (one-token forwards) and of prefill steps
// (forwards of several rows) goes. GemmaModel::forward times each op with a steady clock and
// the process CPU clock (all threads: on a shared machine the CPU seconds are the steadier
// figure); at exit the process prints, on stderr, per kind of step the milliseconds per step
// and the share of each op. Off (one branch per op) otherwise.
#pragma once

#include <chrono>
#include <cstdint>

namespace lumen::model {

enum class Op {
  Embed, Norms, QkvProj, RopeKv, Attention, OProj, GateUp, Gelu, DownProj, Residual, Logits, Softcap,
  Experts, PerLayerInputs, PerLayerGate, kCount
};

bool op_profile_enabled();
void op_profile_add(Op op, bool prefill, double seconds, double cpu_seconds);
// One step finished: a decode step (rows == 1) or a prefill step of `rows` rows.
void op_profile_step(int64_t rows);
double process_cpu_seconds();

// Times the enclosing scope into `op` when profiling is on.
class OpTimer {
 public:
  OpTimer(Op op, bool on, bool prefill) : op_(op), on_(on), prefill_(prefill) {
    if (on_) {
      t0_ = std::chrono::steady_clock::now();
      cpu0_ = process_cpu_seconds();
    }
  }
  ~OpTimer() {
    if (on_)
      op_profile_add(op_, prefill_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(),
                     process_cpu_seconds() - cpu0_);
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  Op op_;
  bool on_, prefill_;
  std::chrono::steady_clock::time_point t0_{};
  double cpu0_ = 0;
};

// Times consecutive phases of a step: start(op) ends the running phase and starts `op`;
// stop() ends it. Does nothing when profiling is off.
class PhaseTimer {
 public:
  PhaseTimer(bool on, bool prefill) : on_(on), prefill_(prefill) {}
  ~PhaseTimer() { stop(); }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;
  void start(Op op) {
    if (!on_) return;
    stop();
    op_ = op;
    running_ = true;
    t0_ = std::chrono::steady_clock::now();
    cpu0_ = process_cpu_seconds();
  }
  void stop() {
    if (!running_) return;
    running_ = false;
    op_profile_add(op_, prefill_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(),
                   process_cpu_seconds() - cpu0_);
  }

 private:
  bool on_, prefill_, running_ = false;
  Op op_ = Op::Embed;
  std::chrono::steady_clock::time_point t0_{};
  double cpu0_ = 0;
};

}  // namespace lumen::model
