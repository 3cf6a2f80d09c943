#include "kv/contiguous_cache.h"

#include <algorithm>
#include <string>

#include "base/error.h"

namespace lumen::kv {

ContiguousCache::ContiguousCache(const spec::ModelSpec& spec) {
  for (const auto& ls : spec.layers) {
    Layer layer;
    layer.row = int64_t(ls.num_kv_heads) * ls.head_dim;
    layers_.push_back(std::move(layer));
  }
}

void ContiguousCache::store(int layer, int32_t pos, const float* k, const float* v) {
  Layer& L = layers_.at(size_t(layer));
  if (pos > L.length)
    throw Error("KV cache: position " + std::to_string(pos) + " stored before position " + std::to_string(L.length));
  L.length = pos + 1;
  const size_t need = size_t(L.length) * size_t(L.row);
  if (L.k.size() < need) {
    // Grow geometrically so a long generation does not reallocate per token.
    const size_t cap = std::max(need, L.k.size() * 2);
    L.k.resize(cap);
    L.v.resize(cap);
  }
  std::copy(k, k + L.row, L.k.data() + size_t(pos) * size_t(L.row));
  std::copy(v, v + L.row, L.v.data() + size_t(pos) * size_t(L.row));
}

void ContiguousCache::read(int layer, int32_t lo, int32_t hi,
                           const std::function<void(const model::KvSpan&)>& visit) const {
  const Layer& L = layers_.at(size_t(layer));
  if (lo < 0 || hi >= L.length || lo > hi)
    throw Error("KV cache: read of positions " + std::to_string(lo) + ".." + std::to_string(hi) + " but " +
                std::to_string(L.length) + " are held");
  model::KvSpan span;
  span.first_pos = lo;
  span.count = hi - lo + 1;
  span.k = L.k.data() + size_t(lo) * size_t(L.row);
  span.v = L.v.data() + size_t(lo) * size_t(L.row);
  span.stride = L.row;
  visit(span);
}

int32_t ContiguousCache::length() const { return layers_.empty() ? 0 : layers_[0].length; }

void ContiguousCache::clear() {
  for (auto& L : layers_) L.length = 0;
}

}  // namespace lumen::kv
