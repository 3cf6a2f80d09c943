#include "model/gemma_model.h"
#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>

#include "base/error.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/qmatmul_decode.h"
#include "kernels/thread_pool.h"
#include "model/op_profile.h"

namespace lumen::model {

using kernels::matmul;
using kernels::rms_norm;

std::vector<float> rope_inv_freq(const spec::RopeSpec& rope, int head_dim) {
  const int pairs = rope.rotated_pairs(head_dim);
  const int base_dim = rope.freq_base_dim > 0 ? rope.freq_base_dim : head_dim;
  std::vector<float> inv(size_t(std::max(pairs, 0)));
  for (int i = 0; i < pairs; ++i) {
    // The reference forms the exponent and the power in f32; so do we.
    const float exponent = float(2 * i) / float(base_dim);
    const float freq = 1.0f / std::pow(float(rope.theta), exponent);
    inv[size_t(i)] = freq / float(rope.scaling_factor);
    if (size_t(i) < rope.freq_factors.size()) inv[size_t(i)] /= rope.freq_factors[size_t(i)];
  }
  return inv;
}

GemmaModel::GemmaModel(spec::ModelSpec spec, ModelWeights weights)
    : spec_(std::move(spec)), weights_(std::move(weights)) {
  for (const auto& ls : spec_.layers) inv_freq_.push_back(rope_inv_freq(ls.rope, ls.head_dim));
  if (spec_.has_per_layer_inputs()) per_layer_inputs_ = std::make_unique<PerLayerInputs>(spec_, weights_);
}

GemmaModel::~GemmaModel() = default;

ExpertCounters GemmaModel::expert_counters() const {
  return {expert_bytes_.load(), expert_selections_.load(), expert_rows_.load()};
}

void GemmaModel::reset_expert_counters() const {
  expert_bytes_ = 0;
  expert_selections_ = 0;
  expert_rows_ = 0;
}

void GemmaModel::attention(const spec::LayerSpec& ls, int layer, std::span<const BatchRow> rows,
                           std::span<SequenceKv* const> caches, const float* q, float* out) const {
  // Windows are released by forward() once every reader of the cache layer has run.
  attend(ls, spec_.attention_scale, spec_.attn_logit_softcap ? *spec_.attn_logit_softcap : 0.0f, ls.kv_layer(layer),
         rows, caches, q, out, /*release_window=*/false);
}

void GemmaModel::experts(const spec::LayerSpec& ls, const LayerWeights& lw, const float* x, int64_t T,
                         float* out) const {
  const int64_t H = spec_.hidden_size, E = ls.num_experts, K = ls.top_k_experts, W = ls.expert_ffn_dim;
  const float eps = spec_.rms_eps;

  // Router, as transformers' Gemma4TextRouter: weightless norm, times the learned gain and
  // 1/sqrt(hidden); softmax over all experts; top-k; renormalized; times the chosen
  // experts' own scales.
  std::vector<float> routed(size_t(T * H)), scores(size_t(T * E));
  const float root = float(std::pow(double(H), -0.5));
  for (int64_t t = 0; t < T; ++t) {
    float* r = &routed[size_t(t * H)];
    rms_norm(x + t * H, H, nullptr, false, eps, r);
    for (int64_t i = 0; i < H; ++i) r[i] = r[i] * lw.router_scale[size_t(i)] * root;
  }
  // A float router takes the f32 path on every path: its top-k choice is discrete (a rounded
  // activation can swap two experts), it is a few thousand weights, and llama.cpp's files store it
  // F32, so a bf16 checkpoint and its GGUF route alike.
  const bool float_router = lw.router.format == quant::WeightFormat::BF16 || lw.router.format == quant::WeightFormat::F16;
  if (float_router)
    kernels::matmul_expanded(routed.data(), T, lw.router, scores.data(), kernels::active_isa());
  else
    matmul(routed.data(), T, lw.router, scores.data());
  std::vector<int32_t> chosen(size_t(T * K));
  std::vector<float> weight(size_t(T * K));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    float* p = &scores[size_t(t * E)];
    kernels::softmax(p, E);
    std::iota(order.begin(), order.end(), 0);
    // torch.topk order: largest first; equal probabilities keep the lower index first.
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0.0f;
    for (int64_t k = 0; k < K; ++k) sum += p[order[size_t(k)]];
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = order[size_t(k)];
      chosen[size_t(t * K + k)] = e;
      weight[size_t(t * K + k)] = p[e] / sum * lw.per_expert_scale[size_t(e)];
    }
  }

  // The experts' input: the residual through its own pre-norm.
  std::vector<float> h(size_t(T * H));
  for (int64_t t = 0; t < T; ++t) rms_norm(x + t * H, H, lw.pre_ffn_norm_2.data(), false, eps, &h[size_t(t * H)]);

  // Rows grouped by expert, so that each selected expert's matrices stream once per step
  // whatever the batch; experts in index order, as transformers accumulates them.
  std::vector<std::vector<std::pair<int32_t, float>>> by_expert(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k)
      by_expert[size_t(chosen[size_t(t * K + k)])].push_back({int32_t(t), weight[size_t(t * K + k)]});
  std::fill(out, out + T * H, 0.0f);
  uint64_t bytes = 0;
  std::vector<float> in, gate_up, act, down;
  if (T == 1) {
    // Decode: every chosen expert's gate/up reads the same input: one fused call.
    std::vector<quant::WeightMatrix> gu(static_cast<size_t>(K));
    std::vector<const quant::WeightMatrix*> gu_w(static_cast<size_t>(K));
    std::vector<float*> gu_y(static_cast<size_t>(K));
    std::vector<int32_t> hit;
    for (int64_t e = 0; e < E; ++e)
      if (!by_expert[size_t(e)].empty()) hit.push_back(int32_t(e));
    gate_up.resize(size_t(int64_t(hit.size()) * 2 * W));
    for (size_t i = 0; i < hit.size(); ++i) {
      gu[i] = lw.expert_gate_up.at(hit[i]);
      gu_w[i] = &gu[i];
      gu_y[i] = &gate_up[i * size_t(2 * W)];
    }
    kernels::matmul_shared_input(h.data(), 1, std::span(gu_w.data(), hit.size()), std::span(gu_y.data(), hit.size()));
    // ... and their down projections, each on its own input, one more call.
    act.resize(hit.size() * size_t(W));
    down.resize(hit.size() * size_t(H));
    std::vector<quant::WeightMatrix> dn(hit.size());
    std::vector<const quant::WeightMatrix*> dn_w(hit.size());
    std::vector<const float*> dn_x(hit.size());
    std::vector<float*> dn_y(hit.size());
    for (size_t i = 0; i < hit.size(); ++i) {
      const float* g = &gate_up[i * size_t(2 * W)];
      kernels::gated_gelu(g, g + W, W, &act[i * size_t(W)]);
      dn[i] = lw.expert_down.at(hit[i]);
      dn_w[i] = &dn[i];
      dn_x[i] = &act[i * size_t(W)];
      dn_y[i] = &down[i * size_t(H)];
    }
    kernels::matvec_each(dn_x, dn_w, dn_y);
    for (size_t i = 0; i < hit.size(); ++i) {
      kernels::axpy(by_expert[size_t(hit[i])][0].second, &down[i * size_t(H)], H, out);
      bytes += lw.expert_gate_up.stride + lw.expert_down.stride;
    }
  } else {
    for (int64_t e = 0; e < E; ++e) {
      const auto& group = by_expert[size_t(e)];
      if (group.empty()) continue;
      const int64_t n = int64_t(group.size());
      in.resize(size_t(n * H));
      for (int64_t i = 0; i < n; ++i)
        std::copy_n(&h[size_t(group[size_t(i)].first) * size_t(H)], H, &in[size_t(i * H)]);
      gate_up.resize(size_t(n * 2 * W));
      matmul(in.data(), n, lw.expert_gate_up.at(e), gate_up.data());
      act.resize(size_t(n * W));
      for (int64_t i = 0; i < n; ++i) {
        const float* g = &gate_up[size_t(i * 2 * W)];
        kernels::gated_gelu(g, g + W, W, &act[size_t(i * W)]);
      }
      down.resize(size_t(n * H));
      matmul(act.data(), n, lw.expert_down.at(e), down.data());
      for (int64_t i = 0; i < n; ++i)
        kernels::axpy(group[size_t(i)].second, &down[size_t(i * H)], H, out + int64_t(group[size_t(i)].first) * H);
      bytes += lw.expert_gate_up.stride + lw.expert_down.stride;
    }
  }
  expert_bytes_ += bytes;
  expert_selections_ += uint64_t(T * K);
  expert_rows_ += uint64_t(T);
}

namespace {

// The per-row work of a step (embedding, norms, RoPE, residuals: each row's is independent of
// the others') spread over the pool when there are several rows; one row runs inline.
template <class Fn>
void for_each_row(int64_t T, const Fn& fn) {
  if (T < 2) {
    for (int64_t t = 0; t < T; ++t) fn(t);
    return;
  }
  kernels::ThreadPool::global().parallel_for(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) fn(t);
  });
}

// The matrices that share one input, for the activation observer.
constexpr MatrixRole kQKV[] = {MatrixRole::Q, MatrixRole::K, MatrixRole::V};
constexpr std::span<const MatrixRole> kQK(kQKV, 2);
constexpr MatrixRole kO[] = {MatrixRole::O};
constexpr MatrixRole kGateUp[] = {MatrixRole::Gate, MatrixRole::Up};
constexpr MatrixRole kDown[] = {MatrixRole::Down};

// Out of line: kept out of forward()'s body (inlined, it upsets GCC's flow analysis of the
// profiling timer there).
[[gnu::noinline]] void observe(ActivationObserver* observer, int layer, std::span<const MatrixRole> roles,
                               const float* x, int64_t rows, int64_t cols) {
  for (MatrixRole role : roles) observer->observe(layer, role, x, rows, cols);
}

}  // namespace

void GemmaModel::forward(std::span<const BatchRow> all_rows, std::span<SequenceKv* const> caches,
                         std::vector<float>& logits, ActivationObserver* observer) const {
  int64_t T = int64_t(all_rows.size());
  const int64_t H = spec_.hidden_size;
  const int64_t V = spec_.vocab_size;
  for (const BatchRow& r : all_rows) {
    if (r.token < 0 || r.token >= V)
      throw Error("token id " + std::to_string(r.token) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
    if (r.seq < 0 || size_t(r.seq) >= caches.size() || !caches[size_t(r.seq)])
      throw Error("batch row names sequence " + std::to_string(r.seq) + ", which has no KV cache");
    if (r.pos < 0) throw Error("negative position in batch");
  }

  // LUMEN_PROFILE=1 times the ops of every step (decode and prefill reported apart).
  const bool prof = op_profile_enabled();
  const bool prefill = T > 1;
  PhaseTimer timer(prof, prefill);
  auto phase = [&](Op op) { timer.start(op); };

  // Embedding lookup, scaled.
  phase(Op::Embed);
  std::vector<float> x(size_t(T * H));
  for_each_row(T, [&](int64_t t) {
    float* xt = x.data() + t * H;
    quant::dequantize_row(weights_.embed_tokens, all_rows[size_t(t)].token, xt);
    for (int64_t i = 0; i < H; ++i) xt[i] *= spec_.embedding_scale;
  });

  // Per-layer inputs: a function of each token (its id and its scaled embedding).
  std::vector<float> pli;
  const int64_t P = spec_.per_layer_input_dim, PW = per_layer_inputs_ ? per_layer_inputs_->width() : 0;
  if (per_layer_inputs_) {
    phase(Op::PerLayerInputs);
    std::vector<int32_t> tokens(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) tokens[size_t(t)] = all_rows[size_t(t)].token;
    pli.resize(size_t(T * PW));
    per_layer_inputs_->prepare(tokens, x.data(), pli.data());
  }

  // The rows the layers run on: all of them until the KV-shared layers, which store nothing,
  // so only the rows whose logits are wanted need to go through them.
  std::vector<BatchRow> kept;
  std::span<const BatchRow> rows = all_rows;

  // RoPE tables per distinct frequency set, made at the first layer that uses the set.
  struct RopeTable {
    const std::vector<float>* inv_freq = nullptr;
    std::vector<float> cos, sin;  // [T, pairs]
  };
  std::vector<RopeTable> rope_tables;
  rope_tables.reserve(inv_freq_.size());
  auto rope_table = [&](int layer) -> const RopeTable& {
    const std::vector<float>& inv = inv_freq_[size_t(layer)];
    for (const RopeTable& r : rope_tables)
      if (*r.inv_freq == inv) return r;
    RopeTable& r = rope_tables.emplace_back();
    r.inv_freq = &inv;
    const int64_t pairs = int64_t(inv.size());
    r.cos.resize(size_t(T * pairs));
    r.sin.resize(size_t(T * pairs));
    for_each_row(T, [&](int64_t t) {
      kernels::rope_angles(rows[size_t(t)].pos, inv.data(), pairs, r.cos.data() + t * pairs, r.sin.data() + t * pairs);
    });
    return r;
  };

  std::vector<float> h(size_t(T * H)), attn_out(size_t(T * H));
  std::vector<float> q, k, v, attn, gate, up, moe_out, pl_gate;
  const bool offset = spec_.norm_weight_offset;
  const float eps = spec_.rms_eps;
  const int first_shared = spec_.first_kv_shared_layer();

  for (int l = 0; l < spec_.num_layers(); ++l) {
    const spec::LayerSpec& ls = spec_.layers[size_t(l)];
    const LayerWeights& lw = weights_.layers[size_t(l)];
    const int64_t hd = ls.head_dim, nq = ls.num_q_heads, nkv = ls.num_kv_heads;
    const int64_t pairs = int64_t(inv_freq_[size_t(l)].size());

    if (l == first_shared) {
      int64_t n = 0;
      for (const BatchRow& r : rows) n += r.want_logits ? 1 : 0;
      if (n < T) {
        for (int64_t t = 0, o = 0; t < T; ++t) {
          if (!rows[size_t(t)].want_logits) continue;
          if (o != t) {
            std::copy_n(&x[size_t(t * H)], H, &x[size_t(o * H)]);
            if (PW) std::copy_n(&pli[size_t(t * PW)], PW, &pli[size_t(o * PW)]);
          }
          kept.push_back(rows[size_t(t)]);
          ++o;
        }
        rows = kept;
        T = n;
        rope_tables.clear();  // made again for the rows kept (references do not outlive a layer)
      }
    }
    if (T == 0) continue;  // no row wants logits: the shared layers have nothing to do

    phase(Op::Norms);
    for_each_row(T, [&](int64_t t) { rms_norm(&x[t * H], H, lw.input_norm.data(), offset, eps, &h[t * H]); });
    phase(Op::QkvProj);
    q.resize(size_t(T * nq * hd));
    if (ls.stores_kv()) {
      k.resize(size_t(T * nkv * hd));
      v.resize(size_t(T * nkv * hd));
      // One call for the projections sharing h (activations quantized once); k = v layers
      // skip v_proj.
      const quant::WeightMatrix* qkv_w[] = {&lw.q_proj, &lw.k_proj, &lw.v_proj};
      float* qkv_y[] = {q.data(), k.data(), v.data()};
      const size_t n_proj = ls.k_eq_v ? 2 : 3;
      if (observer) observe(observer, l, ls.k_eq_v ? kQK : kQKV, h.data(), T, H);
      kernels::matmul_shared_input(h.data(), T, std::span(qkv_w, n_proj), std::span(qkv_y, n_proj));
      if (ls.k_eq_v) v = k;  // the raw projection, before k-norm and RoPE
    } else {
      if (observer) observe(observer, l, std::span(kQKV, 1), h.data(), T, H);
      matmul(h.data(), T, lw.q_proj, q.data());  // a KV-shared layer: queries only
    }

    phase(Op::RopeKv);
    const float* qn = lw.q_norm.empty() ? nullptr : lw.q_norm.data();
    const float* kn = lw.k_norm.empty() ? nullptr : lw.k_norm.data();
    // The angles depend on the row's position and the layer's frequencies only, and the layers
    // share a few frequency sets (Gemma: sliding and full): each set's table once per step.
    const RopeTable& rope = rope_table(l);
    for_each_row(T, [&](int64_t t) {
      const float* cos = rope.cos.data() + t * pairs;
      const float* sin = rope.sin.data() + t * pairs;
      for (int64_t j = 0; j < nq; ++j) {
        float* qh = &q[(t * nq + j) * hd];
        if (ls.q_norm) rms_norm(qh, hd, qn, offset, eps, qh);
        kernels::rope_rotate(qh, hd, pairs, cos, sin);
      }
      if (!ls.stores_kv()) return;
      for (int64_t j = 0; j < nkv; ++j) {
        float* kh = &k[(t * nkv + j) * hd];
        float* vh = &v[(t * nkv + j) * hd];
        if (ls.k_norm) rms_norm(kh, hd, kn, offset, eps, kh);
        kernels::rope_rotate(kh, hd, pairs, cos, sin);
        if (ls.v_norm) rms_norm(vh, hd, nullptr, false, eps, vh);
      }
    });
    // The caches are not shared-write safe (pages are allocated on demand): stores stay serial.
    if (ls.stores_kv()) {
      for (int64_t t = 0; t < T; ++t) {
        const BatchRow& r = rows[size_t(t)];
        caches[size_t(r.seq)]->store(l, r.pos, &k[t * nkv * hd], &v[t * nkv * hd]);
      }
    }

    phase(Op::Attention);
    attn.resize(size_t(T * nq * hd));
    attention(ls, l, rows, caches, q.data(), attn.data());
    phase(Op::OProj);
    if (observer) observe(observer, l, kO, attn.data(), T, nq * hd);
    matmul(attn.data(), T, lw.o_proj, attn_out.data());
    phase(Op::Residual);
    for_each_row(T, [&](int64_t t) {
      float* a = &attn_out[t * H];
      if (spec_.post_attention_norm) rms_norm(a, H, lw.post_attention_norm.data(), offset, eps, a);
      for (int64_t i = 0; i < H; ++i) x[size_t(t * H + i)] += a[i];
      float* f = &h[t * H];
      if (spec_.pre_ffn_norm) rms_norm(&x[t * H], H, lw.pre_ffn_norm.data(), offset, eps, f);
      else std::copy(&x[t * H], &x[t * H] + H, f);
    });

    phase(Op::GateUp);
    const int64_t F = ls.ffn_dim;
    gate.resize(size_t(T * F));
    up.resize(size_t(T * F));
    {
      const quant::WeightMatrix* gu_w[] = {&lw.gate_proj, &lw.up_proj};
      float* gu_y[] = {gate.data(), up.data()};
      if (observer) observe(observer, l, kGateUp, h.data(), T, H);
      kernels::matmul_shared_input(h.data(), T, gu_w, gu_y);
    }
    phase(Op::Gelu);
    kernels::gated_gelu(gate.data(), up.data(), T * F, gate.data());
    phase(Op::DownProj);
    if (observer) observe(observer, l, kDown, gate.data(), T, F);
    matmul(gate.data(), T, lw.down_proj, attn_out.data());

    if (ls.moe()) {
      // The experts run beside the dense MLP, from the same residual (before the MLP).
      phase(Op::Experts);
      moe_out.resize(size_t(T * H));
      experts(ls, lw, x.data(), T, moe_out.data());
      phase(Op::Residual);
      for_each_row(T, [&](int64_t t) {
        float* f = &attn_out[t * H];
        float* m = &moe_out[t * H];
        rms_norm(f, H, lw.post_ffn_norm_1.data(), offset, eps, f);
        rms_norm(m, H, lw.post_ffn_norm_2.data(), offset, eps, m);
        for (int64_t i = 0; i < H; ++i) f[i] += m[i];
      });
    }

    phase(Op::Residual);
    for_each_row(T, [&](int64_t t) {
      float* f = &attn_out[t * H];
      if (spec_.post_ffn_norm) rms_norm(f, H, lw.post_ffn_norm.data(), offset, eps, f);
      float* xt = &x[t * H];
      for (int64_t i = 0; i < H; ++i) xt[i] += f[i];
    });

    if (per_layer_inputs_) {
      // x += norm(W_proj (gelu(W_gate x) * input_l)), input_l this layer's slice.
      phase(Op::PerLayerGate);
      pl_gate.resize(size_t(T * P));
      matmul(x.data(), T, lw.per_layer_gate, pl_gate.data());
      for_each_row(T, [&](int64_t t) {
        kernels::gated_gelu(&pl_gate[size_t(t * P)], &pli[size_t(t * PW + l * P)], P, &pl_gate[size_t(t * P)]);
      });
      matmul(pl_gate.data(), T, lw.per_layer_projection, attn_out.data());
      for_each_row(T, [&](int64_t t) {
        float* f = &attn_out[t * H];
        rms_norm(f, H, lw.post_per_layer_norm.data(), offset, eps, f);
        float* xt = &x[t * H];
        for (int64_t i = 0; i < H; ++i) xt[i] += f[i];
      });
    }

    // The layer scalar multiplies the whole hidden state, after every residual add.
    phase(Op::Residual);
    for_each_row(T, [&](int64_t t) {
      float* xt = &x[t * H];
      for (int64_t i = 0; i < H; ++i) xt[i] *= lw.layer_scalar;
    });
  }

  // Sliding layers' caches may drop what their window has left, now that every layer that
  // reads them has run (the positions of all the batch's rows, not only those kept).
  {
    std::vector<int32_t> last(caches.size(), -1);
    for (const BatchRow& r : all_rows) last[size_t(r.seq)] = std::max(last[size_t(r.seq)], r.pos);
    for (int l = 0; l < spec_.num_layers(); ++l) {
      const spec::LayerSpec& ls = spec_.layers[size_t(l)];
      if (ls.window <= 0 || !ls.stores_kv()) continue;
      for (size_t s = 0; s < caches.size(); ++s)
        if (last[s] >= 0) caches[s]->release_before(l, last[s] - ls.window + 2);
    }
  }

  // Final norm and output projection, only for rows that want logits.
  phase(Op::Norms);
  std::vector<int64_t> wanted;
  for (int64_t t = 0; t < T; ++t)
    if (rows[size_t(t)].want_logits) wanted.push_back(t);
  const int64_t n_out = int64_t(wanted.size());
  std::vector<float> selected(size_t(n_out * H));
  for_each_row(n_out, [&](int64_t i) {
    rms_norm(&x[wanted[size_t(i)] * H], H, weights_.final_norm.data(), offset, eps, &selected[i * H]);
  });
  phase(Op::Logits);
  logits.assign(size_t(n_out * V), 0.0f);
  if (n_out > 0) {
    matmul(selected.data(), n_out, weights_.lm_head, logits.data());
    phase(Op::Softcap);
    if (spec_.final_logit_softcap) {
      const float cap = *spec_.final_logit_softcap;
      for_each_row(n_out, [&](int64_t i) { kernels::softcap(&logits[i * V], V, cap); });
    }
  }
  timer.stop();
  if (prof) op_profile_step(int64_t(all_rows.size()));
}

}  // namespace lumen::model
