#include "runtime/imatrix.h"

#include <algorithm>
#include <vector>

#include "base/error.h"
#include "kv/contiguous_cache.h"

namespace lumen::runtime {

namespace {

constexpr int kRoles = 7;
constexpr const char* kRoleNames[kRoles] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

// Sums of squared inputs per (layer, role), in double while collecting.
class Collector : public model::ActivationObserver {
 public:
  // Sized from the spec up front: observe() allocates nothing.
  explicit Collector(const spec::ModelSpec& spec)
      : sums_(size_t(spec.num_layers()) * kRoles), counts_(size_t(spec.num_layers()) * kRoles, 0) {
    for (int l = 0; l < spec.num_layers(); ++l) {
      const spec::LayerSpec& ls = spec.layers[size_t(l)];
      const size_t q_dim = size_t(ls.num_q_heads) * size_t(ls.head_dim), h = size_t(spec.hidden_size);
      const size_t cols[kRoles] = {h, h, h, q_dim, h, h, size_t(ls.ffn_dim)};
      for (int r = 0; r < kRoles; ++r) sums_[size_t(l) * kRoles + size_t(r)].assign(cols[r], 0.0);
    }
  }
  void observe(int layer, model::MatrixRole role, const float* x, int64_t rows, int64_t cols) noexcept override {
    const size_t k = size_t(layer) * kRoles + size_t(role);
    std::vector<double>& s = sums_[k];
    if (s.size() != size_t(cols)) return;  // not a matrix of this spec: nothing to add to
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * cols;
      for (int64_t j = 0; j < cols; ++j) s[size_t(j)] += double(xr[j]) * xr[j];
    }
    counts_[k] += rows;
  }
  quant::Imatrix result(int layers) const {
    quant::Imatrix m;
    for (int l = 0; l < layers; ++l)
      for (int r = 0; r < kRoles; ++r) {
        const size_t k = size_t(l) * kRoles + size_t(r);
        if (counts_[k] == 0) continue;  // a matrix the model does not have (k = v layers)
        quant::ImatrixEntry e;
        e.sums.assign(sums_[k].begin(), sums_[k].end());
        e.counts = {float(counts_[k])};
        m.entries[gguf_matrix_name(l, model::MatrixRole(r))] = std::move(e);
      }
    return m;
  }

 private:
  std::vector<std::vector<double>> sums_;
  std::vector<int64_t> counts_;
};

}  // namespace

std::string gguf_matrix_name(int layer, model::MatrixRole role) {
  return "blk." + std::to_string(layer) + "." + kRoleNames[int(role)] + ".weight";
}

quant::Imatrix collect_imatrix(const Engine& engine, std::span<const int32_t> text_tokens, const ImatrixOptions& o,
                               const std::function<void(int, int)>& progress) {
  const spec::ModelSpec& spec = engine.spec();
  if (o.ctx < 2 || o.ctx > spec.max_positions)
    throw Error("--ctx: " + std::to_string(o.ctx) + " is outside [2, " + std::to_string(spec.max_positions) + "]");
  const int32_t bos = spec.tokens.bos;
  std::vector<int32_t> tokens{bos};
  tokens.insert(tokens.end(), text_tokens.begin(), text_tokens.end());
  int chunks = int(tokens.size() / size_t(o.ctx));
  if (o.max_chunks > 0) chunks = std::min(chunks, o.max_chunks);
  if (chunks < 1)
    throw Error("the text holds " + std::to_string(tokens.size()) + " tokens: less than one chunk of " +
                std::to_string(o.ctx));
  Collector collector(spec);
  kv::ContiguousCache cache(spec);
  model::SequenceKv* caches[] = {&cache};
  std::vector<model::BatchRow> rows;
  std::vector<float> logits;
  constexpr int kRowsPerStep = 128;
  for (int c = 0; c < chunks; ++c) {
    cache.clear();
    const size_t start = size_t(c) * size_t(o.ctx);
    for (int j0 = 0; j0 < o.ctx; j0 += kRowsPerStep) {
      rows.clear();
      for (int j = j0; j < std::min(o.ctx, j0 + kRowsPerStep); ++j)
        rows.push_back({0, j, j == 0 ? bos : tokens[start + size_t(j)], false});
      engine.model().forward(rows, caches, logits, &collector);
    }
    if (progress) progress(c + 1, chunks);
  }
  quant::Imatrix m = collector.result(spec.num_layers());
  m.chunk_count = uint32_t(chunks);
  m.chunk_size = uint32_t(o.ctx);
  if (!o.dataset.empty()) m.datasets.push_back(o.dataset);
  return m;
}

}  // namespace lumen::runtime
