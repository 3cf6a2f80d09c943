// The simplest KV cache: per layer, every position's keys and values in one growing array
// (f32 by default, or f16/bf16). It keeps every position, sliding layers included, and is
// the reference the paged, ring and tiered caches are checked against.
#pragma once

#include <memory>
#include <vector>

#include "kv/kv_config.h"
#include "model/kv_store.h"
#include "spec/model_spec.h"

namespace lumen::kv {

class ContiguousCache final : public model::SequenceKv {
 public:
  explicit ContiguousCache(const spec::ModelSpec& spec, KvElem dtype = KvElem::F32);

  void store(int layer, int32_t pos, const float* k, const float* v) override;
  void read(int layer, int32_t lo, int32_t hi, const model::KvVisitor& visit) const override;
  void read_head(int layer, int kv_head, int32_t lo, int32_t hi, const model::KvVisitor& visit) const override;
  int32_t length() const override;
  // Forgets every position (a new conversation).
  void clear();
  // Bytes held by the rows stored so far.
  int64_t bytes() const;
  // A copy holding this cache's first `n` positions (n <= length()).
  std::unique_ptr<ContiguousCache> fork(int32_t n) const;

 private:
  struct Layer {
    int64_t row = 0;  // elements per position: kv heads x head dim
    int head_dim = 0;
    int64_t row_bytes = 0;
    std::vector<uint8_t> k, v;
    int32_t length = 0;
  };
  ContiguousCache(const ContiguousCache& from, int32_t n);  // fork(n)
  void check_range(const Layer& L, int32_t lo, int32_t hi) const;
  KvElem dtype_;
  std::vector<Layer> layers_;
};

}  // namespace lumen::kv
