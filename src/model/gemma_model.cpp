#include "model/gemma_model.h"
#include "model/attention.h"

#include <algorithm>
#include <cmath>
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
  }
  return inv;
}

GemmaModel::GemmaModel(spec::ModelSpec spec, ModelWeights weights)
    : spec_(std::move(spec)), weights_(std::move(weights)) {
  for (const auto& ls : spec_.layers) inv_freq_.push_back(rope_inv_freq(ls.rope, ls.head_dim));
}

void GemmaModel::attention(const spec::LayerSpec& ls, int layer, std::span<const BatchRow> rows,
                           std::span<SequenceKv* const> caches, const float* q, float* out) const {
  attend(ls, spec_.attention_scale, spec_.attn_logit_softcap ? *spec_.attn_logit_softcap : 0.0f, layer, rows, caches,
         q, out);
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

}  // namespace

void GemmaModel::forward(std::span<const BatchRow> rows, std::span<SequenceKv* const> caches,
                         std::vector<float>& logits) const {
  const int64_t T = int64_t(rows.size());
  const int64_t H = spec_.hidden_size;
  const int64_t V = spec_.vocab_size;
  for (const BatchRow& r : rows) {
    if (r.token < 0 || r.token >= V)
      throw Error("token id " + std::to_string(r.token) + " is outside the vocabulary [0, " + std::to_string(V) + ")");
    if (r.seq < 0 || size_t(r.seq) >= caches.size() || !caches[size_t(r.seq)])
      throw Error("batch row names sequence " + std::to_string(r.seq) + ", which has no KV cache");
    if (r.pos < 0) throw Error("negative position in batch");
  }

  // LUMEN_PROFILE=1 times the ops of every step (decode and prefill reported apart).
  const bool prof = op_profile_enabled();
  std::optional<OpTimer> timer;
  auto phase = [&](Op op) {
    timer.reset();
    if (prof) timer.emplace(op, true, T > 1);
  };

  // Embedding lookup, scaled.
  phase(Op::Embed);
  std::vector<float> x(size_t(T * H));
  for_each_row(T, [&](int64_t t) {
    float* xt = x.data() + t * H;
    quant::dequantize_row(weights_.embed_tokens, rows[size_t(t)].token, xt);
    for (int64_t i = 0; i < H; ++i) xt[i] *= spec_.embedding_scale;
  });

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
  std::vector<float> q, k, v, attn, gate, up;
  const bool offset = spec_.norm_weight_offset;
  const float eps = spec_.rms_eps;

  for (int l = 0; l < spec_.num_layers(); ++l) {
    const spec::LayerSpec& ls = spec_.layers[size_t(l)];
    const LayerWeights& lw = weights_.layers[size_t(l)];
    const int64_t hd = ls.head_dim, nq = ls.num_q_heads, nkv = ls.num_kv_heads;
    const int64_t pairs = int64_t(inv_freq_[size_t(l)].size());

    phase(Op::Norms);
    for_each_row(T, [&](int64_t t) { rms_norm(&x[t * H], H, lw.input_norm.data(), offset, eps, &h[t * H]); });
    phase(Op::QkvProj);
    q.resize(size_t(T * nq * hd));
    k.resize(size_t(T * nkv * hd));
    v.resize(size_t(T * nkv * hd));
    {
      // One call for the projections sharing h (activations quantized once); k = v layers
      // skip v_proj.
      const quant::WeightMatrix* qkv_w[] = {&lw.q_proj, &lw.k_proj, &lw.v_proj};
      float* qkv_y[] = {q.data(), k.data(), v.data()};
      const size_t n_proj = ls.k_eq_v ? 2 : 3;
      kernels::matmul_shared_input(h.data(), T, std::span(qkv_w, n_proj), std::span(qkv_y, n_proj));
      if (ls.k_eq_v) v = k;  // the raw projection, before k-norm and RoPE
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
      for (int64_t j = 0; j < nkv; ++j) {
        float* kh = &k[(t * nkv + j) * hd];
        float* vh = &v[(t * nkv + j) * hd];
        if (ls.k_norm) rms_norm(kh, hd, kn, offset, eps, kh);
        kernels::rope_rotate(kh, hd, pairs, cos, sin);
        if (ls.v_norm) rms_norm(vh, hd, nullptr, false, eps, vh);
      }
    });
    // The caches are not shared-write safe (pages are allocated on demand): stores stay serial.
    for (int64_t t = 0; t < T; ++t) {
      const BatchRow& r = rows[size_t(t)];
      caches[size_t(r.seq)]->store(l, r.pos, &k[t * nkv * hd], &v[t * nkv * hd]);
    }

    phase(Op::Attention);
    attn.resize(size_t(T * nq * hd));
    attention(ls, l, rows, caches, q.data(), attn.data());
    phase(Op::OProj);
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
      kernels::matmul_shared_input(h.data(), T, gu_w, gu_y);
    }
    phase(Op::Gelu);
    kernels::gated_gelu(gate.data(), up.data(), T * F, gate.data());
    phase(Op::DownProj);
    matmul(gate.data(), T, lw.down_proj, attn_out.data());
    phase(Op::Residual);
    for_each_row(T, [&](int64_t t) {
      float* f = &attn_out[t * H];
      if (spec_.post_ffn_norm) rms_norm(f, H, lw.post_ffn_norm.data(), offset, eps, f);
      float* xt = &x[t * H];
      // The layer scalar multiplies the whole hidden state, after both residual adds.
      for (int64_t i = 0; i < H; ++i) xt[i] = (xt[i] + f[i]) * lw.layer_scalar;
    });
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
  timer.reset();
  if (prof) op_profile_step(T);
}

}  // namespace lumen::model
