#include "model/attention.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "kernels/attention.h"
#include "kernels/thread_pool.h"

namespace lumen::model {

// Flash attention over the cache: for each (sequence, KV head, block of query rows) the
// queries of every query head sharing that KV head walk the visible key range tile by tile
// (kernels/attention.h), so a K/V tile is converted once and serves the whole GQA group,
// and no score matrix beyond one tile exists. When there are fewer such jobs than threads
// (decode), the key range is split and the partial softmax states merged.
void attend(const spec::LayerSpec& ls, float scale, float softcap, int layer, std::span<const BatchRow> rows,
            std::span<SequenceKv* const> caches, const float* q, float* out, bool release_window) {
  const int64_t hd = ls.head_dim, nq = ls.num_q_heads, nkv = ls.num_kv_heads;
  const int64_t group = nq / nkv;
  kernels::AttentionParams params;
  params.head_dim = ls.head_dim;
  params.scale = scale;
  params.softcap = softcap;
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

  // Work in multiply-adds; below about a million, waking the threads costs more than it saves.
  int64_t work = 0;
  for (const Job& j : jobs) work += int64_t(j.last - j.first + 1) * group * (int64_t(j.key_hi) - j.key_lo + 1) * hd;
  const bool serial = work < (int64_t(1) << 20);
  auto parallel = [&](int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (serial) fn(0, n);
    else pool.parallel_for(n, fn);
  };

  parallel(int64_t(jobs.size()) * splits, [&](int64_t begin, int64_t end) {
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
  parallel(int64_t(jobs.size()), [&](int64_t begin, int64_t end) {
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
  if (release_window && ls.window > 0) {
    for (size_t s = 0; s < by_seq.size(); ++s) {
      if (by_seq[s].empty()) continue;
      const int32_t last = rows[size_t(by_seq[s].back())].pos;
      caches[s]->release_before(layer, last - ls.window + 2);
    }
  }
}

}  // namespace lumen::model
