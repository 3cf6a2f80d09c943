// LUMEN_PROFILE=1: where a decode step's time goes. GemmaModel::forward times each op of
// one-token forwards (decode steps) with a steady clock; at exit the process prints, on
// stderr, milliseconds per step and the share of each op. Off (one branch per op) otherwise.
#pragma once

#include <chrono>

namespace lumen::model {

enum class Op {
  Embed, Norms, QkvProj, RopeKv, Attention, OProj, GateUp, Gelu, DownProj, Residual, Logits, Softcap,
  Router, Experts, PerLayerInputs, PerLayerGate, kCount
};

bool op_profile_enabled();
void op_profile_add(Op op, double seconds);
void op_profile_step();  // one decode step finished

// Times the enclosing scope into `op` when profiling is on.
class OpTimer {
 public:
  explicit OpTimer(Op op, bool on) : op_(op), on_(on) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (on_) op_profile_add(op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count());
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  Op op_;
  bool on_;
  std::chrono::steady_clock::time_point t0_{};
};

}  // namespace lumen::model
