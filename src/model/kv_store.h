// What the graph needs from a KV cache, and nothing more: store one position's keys and
// values for a layer, and read a range of positions back as runs of consecutive f32 rows.
// The kv/ layer implements it (contiguous, paged with rings for sliding layers, tiered and
// compressed), so the graph never depends on how, where or at what precision rows are kept.
#pragma once

#include <cstdint>
#include <functional>

namespace lumen::model {

// `count` consecutive positions starting at `first_pos`; row i of k/v is at k + i * stride.
// From read(): a row holds num_kv_heads * head_dim floats of that layer. From read_head():
// a row holds the head_dim floats of one KV head. The pointers are valid during the visit
// only (a cache may convert its rows into a scratch tile).
struct KvSpan {
  int32_t first_pos = 0;
  int32_t count = 0;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t stride = 0;
};

using KvVisitor = std::function<void(const KvSpan&)>;

class SequenceKv {
 public:
  virtual ~SequenceKv() = default;
  // Stores keys (after norm and RoPE) and values of `pos`. Positions arrive in increasing
  // order per layer; storing at pos < length() first forgets positions >= pos (rewind).
  virtual void store(int layer, int32_t pos, const float* k, const float* v) = 0;
  // Visits positions lo..hi (inclusive) in increasing order, whole rows.
  virtual void read(int layer, int32_t lo, int32_t hi, const KvVisitor& visit) const = 0;
  // Visits positions lo..hi of KV head `kv_head` in increasing order, in tiles. Safe to call
  // from several threads at once.
  virtual void read_head(int layer, int kv_head, int32_t lo, int32_t hi, const KvVisitor& visit) const = 0;
  // The graph will read no position < pos of this layer again (it passed out of a sliding
  // window): the cache may free it. Rewinding to a position whose window reaches below what
  // a cache still holds is then an error.
  virtual void release_before(int /*layer*/, int32_t /*pos*/) {}
  // Number of positions held for layer 0 (the next position to store).
  virtual int32_t length() const = 0;
  // Largest n <= want at which the sequence can continue (store at n, rewinding if n <
  // length()): a cache that dropped positions (a sliding layer's ring) may not be able to
  // go back far. 0 (start over) always works. A session reusing a common prefix asks this.
  virtual int32_t resumable_length(int32_t want) const { return want < length() ? (want > 0 ? want : 0) : length(); }
};

}  // namespace lumen::model
