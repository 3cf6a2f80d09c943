// What the graph needs from a KV cache, and nothing more: store one position's keys and
// values for a layer, and read a range of positions back as runs of consecutive rows.
// The kv/ layer implements it (contiguous now; paged, ring and tiered caches later), so
// the graph never depends on how or where the cache keeps its rows.
#pragma once

#include <cstdint>
#include <functional>

namespace lumen::model {

// `count` consecutive positions starting at `first_pos`; row i of k/v is at k + i * stride.
// A row holds num_kv_heads * head_dim floats of that layer.
struct KvSpan {
  int32_t first_pos = 0;
  int32_t count = 0;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t stride = 0;
};

class SequenceKv {
 public:
  virtual ~SequenceKv() = default;
  // Stores keys (after norm and RoPE) and values of `pos`. Positions arrive in increasing
  // order per layer; storing at pos < length() first forgets positions >= pos (rewind).
  virtual void store(int layer, int32_t pos, const float* k, const float* v) = 0;
  // Visits positions lo..hi (inclusive) in increasing order.
  virtual void read(int layer, int32_t lo, int32_t hi, const std::function<void(const KvSpan&)>& visit) const = 0;
  // Number of positions held for layer 0 (the next position to store).
  virtual int32_t length() const = 0;
};

}  // namespace lumen::model
