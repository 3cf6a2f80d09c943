// Split (two-int8) activation quantization for Q8 weights, and its run-time switch (qmatmul.h).
//
// Why: with Q8_0 weights, single int8 activations add an error of the same size as the
// weights' own (both ~1/254 of a block's largest value), and on real models the activation
// error dominates (Gemma 3 270M: q8 top-1 agreement 94.5% with int8 activations). Quantizing
// the residual as a second int8 half leaves the weights' error alone.
//
// How it meets the kernels: the two halves are ordinary ActChunks, so every tile that takes
// activations takes them; qmatmul_isa hands a token's (hi, lo) to the 2-token tile as if they
// were two tokens and adds the two outputs. Nothing in the per-ISA tiles knows of the split.
//
// Bit-identical on every ISA: hi is quantize_activations (already bit-identical), the
// residual is computed here, in this baseline-compiled file, by the same code for every ISA,
// and lo is quantize_activations of that residual.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/error.h"
#include "kernels/qmatmul.h"
#include "quant/repack.h"

namespace lumen::kernels {
namespace {

Q8Activations mode_from_env() {
  const char* env = std::getenv("LUMEN_Q8_ACT");
  if (env == nullptr || *env == '\0') return Q8Activations::Int8x2;
  Q8Activations mode;
  if (!parse_q8_activations(env, mode))
    throw Error(std::string("LUMEN_Q8_ACT='") + env + "' is not one of: int8, int8x2");
  return mode;
}

// -1: not read yet; else the mode.
std::atomic<int>& mode_slot() {
  static std::atomic<int> slot{-1};
  return slot;
}

}  // namespace

Q8Activations q8_activations() {
  int m = mode_slot().load(std::memory_order_relaxed);
  if (m < 0) {
    m = int(mode_from_env());
    mode_slot().store(m, std::memory_order_relaxed);
  }
  return Q8Activations(m);
}

void set_q8_activations(Q8Activations mode) { mode_slot().store(int(mode), std::memory_order_relaxed); }

const char* q8_activations_name(Q8Activations mode) {
  return mode == Q8Activations::Int8 ? "int8" : "int8x2";
}

bool parse_q8_activations(const char* name, Q8Activations& out) {
  for (Q8Activations m : {Q8Activations::Int8, Q8Activations::Int8x2})
    if (std::strcmp(name, q8_activations_name(m)) == 0) {
      out = m;
      return true;
    }
  return false;
}

void quantize_activations_split(const float* x, int64_t K, ActChunk* hi, ActChunk* lo, Isa isa) {
  quantize_activations(x, K, hi, isa);
  const int64_t chunks = quant::padded_cols(K) / quant::kChunk;
  float residual[quant::kChunk];
  for (int64_t c = 0; c < chunks; ++c) {
    const ActChunk& h = hi[c];
    for (int b = 0; b < 4; ++b) {
      const float d = h.dx[b * 4];
      for (int i = 0; i < 32; ++i) {
        const int64_t col = c * quant::kChunk + b * 32 + i;
        const float v = col < K ? x[col] : 0.0f;
        const int8_t q = h.q[(i < 16 ? 0 : 64) + b * 16 + (i % 16)];
        residual[b * 32 + i] = v - float(q) * d;
      }
    }
    quantize_activations(residual, quant::kChunk, lo + c, isa);
  }
}

}  // namespace lumen::kernels
