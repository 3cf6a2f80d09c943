// Per-layer inputs (Gemma 4 E2B/E4B): for every token, num_layers slices of width P that the
// layers' gates mix into the residual. A token's input is a function of its id alone:
//
//   row  = table[id] * sqrt(P)                                   (the per-layer embedding)
//   proj = RMSNorm_P(W_proj (embed[id] * sqrt(H)) / sqrt(H)) * g  (per slice, gain g)
//   in   = (proj + row) / sqrt(2)
//
// The table (per-layer vocab x layers * P: billions of values on E2B/E4B) is never expanded:
// it stays mapped in its stored format and rows are decoded per token. Three session
// settings (the manifest's `session.perLayerInputs`, or flags) shape the work:
//   * a row cache: an LRU of decoded rows, bounded by rows and bytes, in a decoded dtype;
//   * prefetch: a helper thread decodes the rows of tokens that come next (the rest of a
//     prompt chunk while its projection runs, the next chunk's tokens) into the row cache;
//   * a hot cache: an LRU of finished inputs ("prepared tokens"), which also skips the
//     projection.
// None of them changes a value: a row is decoded the same way wherever it comes from, and a
// token's projection is computed one token at a time (the same kernels whatever the batch),
// so logits are bit-identical with any cache setting (tests/parity/test_family.py).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "model/per_layer_input_config.h"
#include "model/weights.h"
#include "spec/model_spec.h"

namespace lumen::model {

struct PerLayerInputStats {
  uint64_t tokens = 0;  // inputs asked for
  uint64_t hot_hits = 0, hot_misses = 0;
  uint64_t row_hits = 0, row_misses = 0, row_evictions = 0;
  uint64_t rows_queued = 0;       // rows handed to the helper (it may find them decoded already)
  uint64_t rows_prefetched = 0;   // rows the helper decoded ahead of use
  uint64_t table_bytes_read = 0;  // bytes of the stored table read (misses and prefetches)
  uint64_t hot_entries = 0, row_entries = 0;
  uint64_t hot_bytes = 0, row_bytes = 0;
};

class PerLayerInputs {
 public:
  // Binds the spec's table and projection; `weights` must outlive this object.
  PerLayerInputs(const spec::ModelSpec& spec, const ModelWeights& weights);
  ~PerLayerInputs();
  PerLayerInputs(const PerLayerInputs&) = delete;
  PerLayerInputs& operator=(const PerLayerInputs&) = delete;

  // Applies a configuration: caches emptied, the table copied in or released, statistics
  // reset. Throws lumen::Error for a decoded dtype that cannot hold the table's values
  // exactly (the results would then depend on whether a row came from the cache).
  void configure(const PerLayerInputConfig& config);
  const PerLayerInputConfig& config() const { return config_; }

  int64_t width() const { return width_; }  // layers * P
  // out[t * width() ..] = the input of tokens[t]; embeds[t * hidden ..] its scaled embedding.
  void prepare(std::span<const int32_t> tokens, const float* embeds, float* out);
  // Hints tokens that will be asked for soon: with prefetch on, the helper decodes the first
  // rows_ahead of them into the row cache (or reads their bytes when the cache is off).
  void hint(std::span<const int32_t> tokens);

  PerLayerInputStats stats() const;
  void reset_stats();
  // Bytes of the stored table one row takes.
  size_t table_row_bytes() const;

 private:
  struct RowEntry;
  // The decoded row of `token` (f32), from the row cache or the table.
  void row_of(int32_t token, float* out);
  void decode_from_table(int32_t token, float* out);
  void insert_row(int32_t token, const float* row);
  void insert_prepared(int32_t token, const float* in);
  void prefetch_loop();
  void stop_prefetcher();
  const void* table_data() const;

  int64_t hidden_ = 0, layers_ = 0, dim_ = 0, width_ = 0, vocab_ = 0;
  float eps_ = 1e-6f;
  const ModelWeights& w_;
  PerLayerInputConfig config_;
  std::vector<std::byte> resident_;  // the table's bytes when resident

  // LRU lists: most recent at the front; maps token -> list position.
  mutable std::mutex mutex_;
  std::list<std::pair<int32_t, std::vector<std::byte>>> rows_;
  std::unordered_map<int32_t, decltype(rows_)::iterator> row_index_;
  int64_t row_cache_bytes_used_ = 0;
  std::list<std::pair<int32_t, std::vector<float>>> hot_;
  std::unordered_map<int32_t, decltype(hot_)::iterator> hot_index_;
  int64_t hot_bytes_used_ = 0;
  PerLayerInputStats stats_;

  // Prefetch helper.
  std::thread helper_;
  std::condition_variable wake_;
  std::deque<int32_t> queue_;
  bool stopping_ = false;
};

}  // namespace lumen::model
