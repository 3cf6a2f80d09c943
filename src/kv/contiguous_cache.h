// The simplest KV cache: per layer, every position's keys and values in one growing f32
// array. It is the reference the paged, ring and tiered caches are checked against.
#pragma once

#include <vector>

#include "model/kv_store.h"
#include "spec/model_spec.h"

namespace lumen::kv {

class ContiguousCache final : public model::SequenceKv {
 public:
  explicit ContiguousCache(const spec::ModelSpec& spec);

  void store(int layer, int32_t pos, const float* k, const float* v) override;
  void read(int layer, int32_t lo, int32_t hi, const std::function<void(const model::KvSpan&)>& visit) const override;
  int32_t length() const override;
  // Forgets every position (a new conversation).
  void clear();

 private:
  struct Layer {
    int64_t row = 0;  // floats per position: kv heads x head dim
    std::vector<float> k, v;
    int32_t length = 0;
  };
  std::vector<Layer> layers_;
};

}  // namespace lumen::kv
