#include "kv/contiguous_cache.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "kv/row_codec.h"

namespace lumen::kv {
namespace {
// Rows converted per visit when the storage is not f32 (a tile that stays in cache).
constexpr int32_t kConvertTile = 64;
}  // namespace

ContiguousCache::ContiguousCache(const spec::ModelSpec& spec, KvElem dtype) : dtype_(dtype) {
  if (dtype == KvElem::Int8 || dtype == KvElem::Int4)
    throw Error("KV cache: the contiguous layout stores f32, f16 or bf16, not " + std::string(kv_elem_name(dtype)));
  for (const auto& ls : spec.layers) {
    Layer layer;
    layer.row = int64_t(ls.num_kv_heads) * ls.head_dim;
    layer.head_dim = ls.head_dim;
    layer.row_bytes = row_bytes(dtype, layer.row, 1);
    layers_.push_back(std::move(layer));
  }
}

void ContiguousCache::store(int layer, int32_t pos, const float* k, const float* v) {
  Layer& L = layers_.at(size_t(layer));
  if (pos > L.length)
    throw Error("KV cache: position " + std::to_string(pos) + " stored before position " + std::to_string(L.length));
  L.length = pos + 1;
  const size_t need = size_t(L.length) * size_t(L.row_bytes);
  if (L.k.size() < need) {
    // Grow geometrically so a long generation does not reallocate per token.
    const size_t cap = std::max(need, L.k.size() * 2);
    L.k.resize(cap);
    L.v.resize(cap);
  }
  encode_row(dtype_, k, L.row, 1, L.k.data() + size_t(pos) * size_t(L.row_bytes));
  encode_row(dtype_, v, L.row, 1, L.v.data() + size_t(pos) * size_t(L.row_bytes));
}

void ContiguousCache::check_range(const Layer& L, int32_t lo, int32_t hi) const {
  if (lo < 0 || hi >= L.length || lo > hi)
    throw Error("KV cache: read of positions " + std::to_string(lo) + ".." + std::to_string(hi) + " but " +
                std::to_string(L.length) + " are held");
}

void ContiguousCache::read(int layer, int32_t lo, int32_t hi, const model::KvVisitor& visit) const {
  const Layer& L = layers_.at(size_t(layer));
  check_range(L, lo, hi);
  if (dtype_ == KvElem::F32) {
    model::KvSpan span{lo, hi - lo + 1, reinterpret_cast<const float*>(L.k.data()) + size_t(lo) * size_t(L.row),
                       reinterpret_cast<const float*>(L.v.data()) + size_t(lo) * size_t(L.row), L.row};
    visit(span);
    return;
  }
  thread_local std::vector<float> kt, vt;
  for (int32_t pos = lo; pos <= hi; pos += kConvertTile) {
    const int32_t n = std::min(kConvertTile, hi - pos + 1);
    kt.resize(size_t(n * L.row));
    vt.resize(size_t(n * L.row));
    for (int32_t i = 0; i < n; ++i) {
      const size_t off = size_t(pos + i) * size_t(L.row_bytes);
      decode_row_slice(dtype_, L.k.data() + off, L.row, 1, 0, L.row, kt.data() + i * L.row);
      decode_row_slice(dtype_, L.v.data() + off, L.row, 1, 0, L.row, vt.data() + i * L.row);
    }
    visit(model::KvSpan{pos, n, kt.data(), vt.data(), L.row});
  }
}

void ContiguousCache::read_head(int layer, int kv_head, int32_t lo, int32_t hi, const model::KvVisitor& visit) const {
  const Layer& L = layers_.at(size_t(layer));
  check_range(L, lo, hi);
  const int64_t hd = L.head_dim, off = int64_t(kv_head) * hd;
  if (dtype_ == KvElem::F32) {
    model::KvSpan span{lo, hi - lo + 1, reinterpret_cast<const float*>(L.k.data()) + size_t(lo) * size_t(L.row) + off,
                       reinterpret_cast<const float*>(L.v.data()) + size_t(lo) * size_t(L.row) + off, L.row};
    visit(span);
    return;
  }
  thread_local std::vector<float> kt, vt;
  for (int32_t pos = lo; pos <= hi; pos += kConvertTile) {
    const int32_t n = std::min(kConvertTile, hi - pos + 1);
    kt.resize(size_t(n * hd));
    vt.resize(size_t(n * hd));
    for (int32_t i = 0; i < n; ++i) {
      const size_t at = size_t(pos + i) * size_t(L.row_bytes);
      decode_row_slice(dtype_, L.k.data() + at, L.row, 1, off, hd, kt.data() + i * hd);
      decode_row_slice(dtype_, L.v.data() + at, L.row, 1, off, hd, vt.data() + i * hd);
    }
    visit(model::KvSpan{pos, n, kt.data(), vt.data(), hd});
  }
}

int32_t ContiguousCache::length() const { return layers_.empty() ? 0 : layers_[0].length; }

void ContiguousCache::clear() {
  for (auto& L : layers_) L.length = 0;
}

int64_t ContiguousCache::bytes() const {
  int64_t total = 0;
  for (const auto& L : layers_) total += 2 * int64_t(L.length) * L.row_bytes;
  return total;
}

std::unique_ptr<ContiguousCache> ContiguousCache::fork(int32_t n) const {
  if (n < 0 || n > length())
    throw Error("KV cache: cannot fork at position " + std::to_string(n) + " (" + std::to_string(length()) + " are held)");
  std::unique_ptr<ContiguousCache> copy(new ContiguousCache(*this, n));
  return copy;
}

ContiguousCache::ContiguousCache(const ContiguousCache& from, int32_t n) : dtype_(from.dtype_) {
  for (const Layer& L : from.layers_) {
    Layer c;
    c.row = L.row;
    c.head_dim = L.head_dim;
    c.row_bytes = L.row_bytes;
    c.length = std::min(L.length, n);
    const auto bytes = int64_t(c.length) * L.row_bytes;
    c.k.assign(L.k.begin(), L.k.begin() + bytes);
    c.v.assign(L.v.begin(), L.v.begin() + bytes);
    layers_.push_back(std::move(c));
  }
}

}  // namespace lumen::kv
