#include "model/gemma_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/thread_pool.h"

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

// Flash attention over the cache: for each (sequence, KV head, block of query rows) the
// queries of every query head sharing that KV head walk the visible key range tile by tile
// (kernels/attention.h), so a K/V tile is converted once and serves the whole GQA group,
// and no score matrix beyond one tile exists. When there are fewer such jobs than threads
// (decode), the key range is split and the partial softmax states merged.
void GemmaModel::attention(const spec::LayerSpec& ls, int layer, std::span<const BatchRow> rows,
                           std::span<SequenceKv* const> caches, const float* q, float* out) const {
  const int64_t hd = ls.head_dim, nq = ls.num_q_heads, nkv = ls.num_kv_heads;
  const int64_t group = nq / nkv;
  kernels::AttentionParams params;
  params.head_dim = ls.head_dim;
  params.scale = spec_.attention_scale;
  params.softcap = spec_.attn_logit_softcap ? *spec_.attn_logit_softcap : 0.0f;
  params.window = ls.window;

  // Batch rows by sequence, in batch (= position) order.
  std::vector<std::vector<int32_t>> by_seq(caches.size());
  for (size_t t = 0; t < rows.size(); ++t) by_seq[size_t(rows[t].seq)].push_back(int32_t(t));

  // About 64 query vectors per job: enough to amortize a tile, small enough to stay in cache.
  const int64_t rows_per_block = std::max<int64_t>(1, 64 / group);
  struct Job {
    int32_t seq;
    int32_t kv_head;
    int32_t first, last;  // indices into by_seq[seq]
    int32_t key_lo, key_hi;
  };
  std::vector<Job> jobs;
  for (size_t s = 0; s < by_seq.size(); ++s) {
    const auto& idx = by_seq[s];
    for (int64_t b = 0; b < int64_t(idx.size()); b += rows_per_block) {
      const int32_t last = int32_t(std::min<int64_t>(int64_t(idx.size()), b + rows_per_block) - 1);
      const int32_t lo = kernels::attention_first_visible(params, rows[size_t(idx[size_t(b)])].pos);
      const int32_t hi = rows[size_t(idx[size_t(last)])].pos;
      for (int32_t h = 0; h < nkv; ++h) jobs.push_back({int32_t(s), h, int32_t(b), last, lo, hi});
    }
  }
  kernels::ThreadPool& pool = kernels::ThreadPool::global();
  // Split long key ranges when the jobs alone cannot keep the threads busy.
  constexpr int32_t kMinKeysPerSplit = 256;
  int64_t splits = 1;
  if (int64_t(jobs.size()) < 2 * pool.size()) {
    int32_t widest = 0;
    for (const Job& j : jobs) widest = std::max(widest, j.key_hi - j.key_lo + 1);
    splits = std::clamp<int64_t>((2 * pool.size() + int64_t(jobs.size()) - 1) / int64_t(jobs.size()), 1,
                                 std::max<int32_t>(1, widest / kMinKeysPerSplit));
  }
  // Per (job, split): the online-softmax state of the job's queries.
  const int64_t max_queries = rows_per_block * group;
  const int64_t state_floats = max_queries * (hd + 2);
  std::vector<float> states(size_t(int64_t(jobs.size()) * splits * state_floats));
  auto state_of = [&](int64_t job, int64_t split, int64_t n) {
    float* base = states.data() + (job * splits + split) * state_floats;
    return kernels::OnlineSoftmaxState{base, base + max_queries, base + 2 * max_queries, int(n)};
  };
  auto queries_of = [&](const Job& j, std::vector<const float*>& qp, std::vector<int32_t>& qpos, std::vector<float*>* op) {
    qp.clear();
    qpos.clear();
    if (op) op->clear();
    const auto& idx = by_seq[size_t(j.seq)];
    for (int32_t r = j.first; r <= j.last; ++r) {
      const int64_t t = idx[size_t(r)];
      for (int64_t g = 0; g < group; ++g) {
        const int64_t h = int64_t(j.kv_head) * group + g;
        qp.push_back(q + (t * nq + h) * hd);
        qpos.push_back(rows[size_t(t)].pos);
        if (op) op->push_back(out + (t * nq + h) * hd);
      }
    }
  };

  pool.parallel_for(int64_t(jobs.size()) * splits, [&](int64_t begin, int64_t end) {
    std::vector<const float*> qp;
    std::vector<int32_t> qpos;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t ji = task / splits, split = task % splits;
      const Job& j = jobs[size_t(ji)];
      queries_of(j, qp, qpos, nullptr);
      kernels::OnlineSoftmaxState st = state_of(ji, split, int64_t(qp.size()));
      kernels::online_softmax_reset(params, st);
      const int64_t width = int64_t(j.key_hi) - j.key_lo + 1;
      const int32_t lo = int32_t(j.key_lo + width * split / splits);
      const int32_t hi = int32_t(j.key_lo + width * (split + 1) / splits - 1);
      if (lo > hi) continue;
      caches[size_t(j.seq)]->read_head(layer, j.kv_head, lo, hi, [&](const KvSpan& s) {
        kernels::online_softmax_tile(params, qp.data(), qpos.data(), s.k, s.v, s.stride, s.first_pos, s.count, st);
      });
    }
  });
  pool.parallel_for(int64_t(jobs.size()), [&](int64_t begin, int64_t end) {
    std::vector<const float*> qp;
    std::vector<int32_t> qpos;
    std::vector<float*> op;
    std::vector<kernels::OnlineSoftmaxState> parts(static_cast<size_t>(splits));
    for (int64_t ji = begin; ji < end; ++ji) {
      queries_of(jobs[size_t(ji)], qp, qpos, &op);
      for (int64_t s = 0; s < splits; ++s) parts[size_t(s)] = state_of(ji, s, int64_t(qp.size()));
      if (splits == 1) kernels::online_softmax_finish(params, parts[0], op.data());
      else kernels::online_softmax_merge(params, parts.data(), int(splits), op.data());
    }
  });

  // Positions the sliding window has left will not be read again: the cache may drop them.
  if (ls.window > 0) {
    for (size_t s = 0; s < by_seq.size(); ++s) {
      if (by_seq[s].empty()) continue;
      const int32_t last = rows[size_t(by_seq[s].back())].pos;
      caches[s]->release_before(layer, last - ls.window + 2);
    }
  }
}

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

  // Embedding lookup, scaled.
  std::vector<float> x(size_t(T * H));
  for (int64_t t = 0; t < T; ++t) {
    float* xt = x.data() + t * H;
    quant::dequantize_row(weights_.embed_tokens, rows[size_t(t)].token, xt);
    for (int64_t i = 0; i < H; ++i) xt[i] *= spec_.embedding_scale;
  }

  std::vector<float> h(size_t(T * H)), attn_out(size_t(T * H));
  std::vector<float> q, k, v, attn, gate, up, cos, sin;
  const bool offset = spec_.norm_weight_offset;
  const float eps = spec_.rms_eps;

  for (int l = 0; l < spec_.num_layers(); ++l) {
    const spec::LayerSpec& ls = spec_.layers[size_t(l)];
    const LayerWeights& lw = weights_.layers[size_t(l)];
    const int64_t hd = ls.head_dim, nq = ls.num_q_heads, nkv = ls.num_kv_heads;
    const int64_t pairs = int64_t(inv_freq_[size_t(l)].size());

    for (int64_t t = 0; t < T; ++t) rms_norm(&x[t * H], H, lw.input_norm.data(), offset, eps, &h[t * H]);
    q.resize(size_t(T * nq * hd));
    k.resize(size_t(T * nkv * hd));
    v.resize(size_t(T * nkv * hd));
    matmul(h.data(), T, lw.q_proj, q.data());
    matmul(h.data(), T, lw.k_proj, k.data());
    if (ls.k_eq_v) {
      v = k;  // the raw projection, before k-norm and RoPE
    } else {
      matmul(h.data(), T, lw.v_proj, v.data());
    }

    cos.resize(size_t(pairs));
    sin.resize(size_t(pairs));
    const float* qn = lw.q_norm.empty() ? nullptr : lw.q_norm.data();
    const float* kn = lw.k_norm.empty() ? nullptr : lw.k_norm.data();
    for (int64_t t = 0; t < T; ++t) {
      kernels::rope_angles(rows[size_t(t)].pos, inv_freq_[size_t(l)].data(), pairs, cos.data(), sin.data());
      for (int64_t j = 0; j < nq; ++j) {
        float* qh = &q[(t * nq + j) * hd];
        if (ls.q_norm) rms_norm(qh, hd, qn, offset, eps, qh);
        kernels::rope_rotate(qh, hd, pairs, cos.data(), sin.data());
      }
      for (int64_t j = 0; j < nkv; ++j) {
        float* kh = &k[(t * nkv + j) * hd];
        float* vh = &v[(t * nkv + j) * hd];
        if (ls.k_norm) rms_norm(kh, hd, kn, offset, eps, kh);
        kernels::rope_rotate(kh, hd, pairs, cos.data(), sin.data());
        if (ls.v_norm) rms_norm(vh, hd, nullptr, false, eps, vh);
      }
      const BatchRow& r = rows[size_t(t)];
      caches[size_t(r.seq)]->store(l, r.pos, &k[t * nkv * hd], &v[t * nkv * hd]);
    }

    attn.resize(size_t(T * nq * hd));
    attention(ls, l, rows, caches, q.data(), attn.data());
    matmul(attn.data(), T, lw.o_proj, attn_out.data());
    for (int64_t t = 0; t < T; ++t) {
      float* a = &attn_out[t * H];
      if (spec_.post_attention_norm) rms_norm(a, H, lw.post_attention_norm.data(), offset, eps, a);
      for (int64_t i = 0; i < H; ++i) x[size_t(t * H + i)] += a[i];
      float* f = &h[t * H];
      if (spec_.pre_ffn_norm) rms_norm(&x[t * H], H, lw.pre_ffn_norm.data(), offset, eps, f);
      else std::copy(&x[t * H], &x[t * H] + H, f);
    }

    const int64_t F = ls.ffn_dim;
    gate.resize(size_t(T * F));
    up.resize(size_t(T * F));
    matmul(h.data(), T, lw.gate_proj, gate.data());
    matmul(h.data(), T, lw.up_proj, up.data());
    kernels::gated_gelu(gate.data(), up.data(), T * F, gate.data());
    matmul(gate.data(), T, lw.down_proj, attn_out.data());
    for (int64_t t = 0; t < T; ++t) {
      float* f = &attn_out[t * H];
      if (spec_.post_ffn_norm) rms_norm(f, H, lw.post_ffn_norm.data(), offset, eps, f);
      float* xt = &x[t * H];
      // The layer scalar multiplies the whole hidden state, after both residual adds.
      for (int64_t i = 0; i < H; ++i) xt[i] = (xt[i] + f[i]) * lw.layer_scalar;
    }
  }

  // Final norm and output projection, only for rows that want logits.
  std::vector<float> selected;
  int64_t n_out = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (!rows[size_t(t)].want_logits) continue;
    selected.resize(size_t((n_out + 1) * H));
    rms_norm(&x[t * H], H, weights_.final_norm.data(), offset, eps, &selected[n_out * H]);
    ++n_out;
  }
  logits.assign(size_t(n_out * V), 0.0f);
  if (n_out == 0) return;
  matmul(selected.data(), n_out, weights_.lm_head, logits.data());
  if (spec_.final_logit_softcap) kernels::softcap(logits.data(), n_out * V, *spec_.final_logit_softcap);
}

}  // namespace lumen::model
