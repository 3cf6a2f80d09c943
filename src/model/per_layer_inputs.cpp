#include "model/per_layer_inputs.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "base/error.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace lumen::model {

namespace {

quant::WeightFormat row_format(RowDtype d) {
  switch (d) {
    case RowDtype::F16: return quant::WeightFormat::F16;
    case RowDtype::BF16: return quant::WeightFormat::BF16;
    default: return quant::WeightFormat::F32;
  }
}

}  // namespace

PerLayerInputs::PerLayerInputs(const spec::ModelSpec& spec, const ModelWeights& weights)
    : hidden_(spec.hidden_size),
      layers_(spec.num_layers()),
      dim_(spec.per_layer_input_dim),
      width_(int64_t(spec.num_layers()) * spec.per_layer_input_dim),
      vocab_(spec.per_layer_vocab),
      eps_(spec.rms_eps),
      w_(weights) {
  configure(config_);
}

PerLayerInputs::~PerLayerInputs() { stop_prefetcher(); }

void PerLayerInputs::stop_prefetcher() {
  if (!helper_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  helper_.join();
  stopping_ = false;
  queue_.clear();
}

void PerLayerInputs::configure(const PerLayerInputConfig& config) {
  const quant::WeightFormat stored = w_.per_layer_table.format;
  if (config.row_cache && config.decoded != RowDtype::F32 && row_format(config.decoded) != stored)
    throw Error(std::string("per-layer input row cache: decoded dtype ") + row_dtype_name(config.decoded) +
                " cannot hold the table's " + quant::format_name(stored) +
                " values exactly (rows would differ between cache hits and misses): use f32");
  if (config.row_cache && (config.row_cache_rows < 1 || config.row_cache_bytes < 1))
    throw Error("per-layer input row cache: rows and bytes limits must be positive");
  if (config.hot_cache && (config.hot_tokens < 1 || config.hot_bytes < 1))
    throw Error("per-layer input hot cache: token and byte limits must be positive");
  if (config.prefetch && config.rows_ahead < 1) throw Error("per-layer input prefetch: rows ahead must be at least 1");
  stop_prefetcher();
  std::lock_guard lock(mutex_);
  config_ = config;
  rows_.clear();
  row_index_.clear();
  row_cache_bytes_used_ = 0;
  hot_.clear();
  hot_index_.clear();
  hot_bytes_used_ = 0;
  stats_ = {};
  resident_.clear();
  resident_.shrink_to_fit();
  if (config_.resident && w_.per_layer_table.data) {
    const auto* src = static_cast<const std::byte*>(w_.per_layer_table.data);
    resident_.assign(src, src + w_.per_layer_table.storage_bytes());
  }
  if (config_.prefetch) helper_ = std::thread([this] { prefetch_loop(); });
}

const void* PerLayerInputs::table_data() const {
  return resident_.empty() ? w_.per_layer_table.data : resident_.data();
}

size_t PerLayerInputs::table_row_bytes() const {
  // Row-major formats: the row's bytes; an interleaved layout: a row's share of its group.
  const quant::WeightMatrix& t = w_.per_layer_table;
  return t.rows > 0 ? t.storage_bytes() / size_t(t.rows) : 0;
}

void PerLayerInputs::decode_from_table(int32_t token, float* out) {
  quant::WeightMatrix table = w_.per_layer_table;
  table.data = table_data();
  quant::dequantize_row(table, token, out);
}

void PerLayerInputs::insert_row(int32_t token, const float* row) {
  // Caller holds mutex_.
  if (!config_.row_cache || row_index_.count(token)) return;
  const quant::WeightFormat fmt = row_format(config_.decoded);
  const size_t bytes = quant::format_row_bytes(fmt, width_);
  if (int64_t(bytes) > config_.row_cache_bytes) return;  // one row over the limit: nothing fits
  std::vector<std::byte> stored(bytes);
  if (fmt == quant::WeightFormat::F32) {
    std::memcpy(stored.data(), row, bytes);
  } else {
    // Lossless (configure() allows f16/bf16 only for a table stored so): the table's own bytes.
    const auto* base = static_cast<const std::byte*>(table_data());
    std::memcpy(stored.data(), base + size_t(token) * table_row_bytes(), bytes);
  }
  rows_.emplace_front(token, std::move(stored));
  row_index_[token] = rows_.begin();
  row_cache_bytes_used_ += int64_t(bytes);
  while (int64_t(rows_.size()) > config_.row_cache_rows || row_cache_bytes_used_ > config_.row_cache_bytes) {
    row_cache_bytes_used_ -= int64_t(rows_.back().second.size());
    row_index_.erase(rows_.back().first);
    rows_.pop_back();
    ++stats_.row_evictions;
  }
}

void PerLayerInputs::row_of(int32_t token, float* out) {
  {
    std::lock_guard lock(mutex_);
    auto it = row_index_.find(token);
    if (it != row_index_.end()) {
      rows_.splice(rows_.begin(), rows_, it->second);
      const auto& bytes = it->second->second;
      quant::to_f32(row_format(config_.decoded), bytes.data(), width_, out);
      ++stats_.row_hits;
      return;
    }
    ++stats_.row_misses;
    stats_.table_bytes_read += table_row_bytes();
  }
  decode_from_table(token, out);
  std::lock_guard lock(mutex_);
  insert_row(token, out);
}

void PerLayerInputs::insert_prepared(int32_t token, const float* in) {
  // Caller holds mutex_.
  if (!config_.hot_cache || hot_index_.count(token)) return;
  const int64_t bytes = width_ * int64_t(sizeof(float));
  if (bytes > config_.hot_bytes) return;
  hot_.emplace_front(token, std::vector<float>(in, in + width_));
  hot_index_[token] = hot_.begin();
  hot_bytes_used_ += bytes;
  while (int64_t(hot_.size()) > config_.hot_tokens || hot_bytes_used_ > config_.hot_bytes) {
    hot_bytes_used_ -= bytes;
    hot_index_.erase(hot_.back().first);
    hot_.pop_back();
  }
}

void PerLayerInputs::prepare(std::span<const int32_t> tokens, const float* embeds, float* out) {
  const int64_t T = int64_t(tokens.size());
  // Tokens not in the hot cache, first occurrence each; repeats copy it afterwards.
  std::vector<int64_t> todo;
  std::vector<int64_t> same_as(size_t(T), -1);
  {
    std::unordered_map<int32_t, int64_t> first;
    std::lock_guard lock(mutex_);
    stats_.tokens += uint64_t(T);
    for (int64_t t = 0; t < T; ++t) {
      const int32_t id = tokens[size_t(t)];
      if (id < 0 || id >= vocab_)
        throw Error("token id " + std::to_string(id) + " has no per-layer input row (the table has " +
                    std::to_string(vocab_) + ")");
      auto hit = hot_index_.find(id);
      if (hit != hot_index_.end()) {
        hot_.splice(hot_.begin(), hot_, hit->second);
        std::memcpy(out + t * width_, hit->second->second.data(), size_t(width_) * sizeof(float));
        ++stats_.hot_hits;
        continue;
      }
      auto [it, fresh] = first.emplace(id, t);
      if (fresh) {
        todo.push_back(t);
        ++stats_.hot_misses;
      } else {
        same_as[size_t(t)] = it->second;
      }
    }
  }
  if (!todo.empty()) {
    // The rows of later tokens are decoded by the helper while this thread projects.
    if (config_.prefetch && todo.size() > 1) {
      std::vector<int32_t> ahead;
      for (size_t i = 1; i < todo.size(); ++i) ahead.push_back(tokens[size_t(todo[i])]);
      {
        std::lock_guard lock(mutex_);
        for (int32_t id : ahead) queue_.push_back(id);
        stats_.rows_queued += ahead.size();
      }
      wake_.notify_one();
    }
    const float proj_scale = 1.0f / std::sqrt(float(hidden_));
    const float row_scale = std::sqrt(float(dim_));
    const float mix = float(std::pow(2.0, -0.5));
    std::vector<float> row(static_cast<size_t>(width_));
    for (int64_t t : todo) {
      float* o = out + t * width_;
      // One token at a time: the same kernel call whatever the batch, so a prepared input is
      // the same bits in prefill and decode, cached or not.
      kernels::matmul(embeds + t * hidden_, 1, w_.per_layer_model_projection, o);
      for (int64_t i = 0; i < width_; ++i) o[i] *= proj_scale;
      for (int64_t l = 0; l < layers_; ++l)
        kernels::rms_norm(o + l * dim_, dim_, w_.per_layer_projection_norm.data(), false, eps_, o + l * dim_);
      row_of(tokens[size_t(t)], row.data());
      for (int64_t i = 0; i < width_; ++i) o[i] = (o[i] + row[size_t(i)] * row_scale) * mix;
      std::lock_guard lock(mutex_);
      insert_prepared(tokens[size_t(t)], o);
    }
  }
  for (int64_t t = 0; t < T; ++t)
    if (same_as[size_t(t)] >= 0)
      std::memcpy(out + t * width_, out + same_as[size_t(t)] * width_, size_t(width_) * sizeof(float));
}

void PerLayerInputs::hint(std::span<const int32_t> tokens) {
  if (!config_.prefetch || tokens.empty()) return;
  {
    std::lock_guard lock(mutex_);
    const size_t n = std::min(tokens.size(), size_t(config_.rows_ahead));
    for (size_t i = 0; i < n; ++i)
      if (tokens[i] >= 0 && tokens[i] < vocab_ && !hot_index_.count(tokens[i])) {
        queue_.push_back(tokens[i]);
        ++stats_.rows_queued;
      }
  }
  wake_.notify_one();
}

void PerLayerInputs::prefetch_loop() {
  std::vector<float> row(static_cast<size_t>(width_));
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    const int32_t id = queue_.front();
    queue_.pop_front();
    if (row_index_.count(id)) continue;
    ++stats_.rows_prefetched;
    stats_.table_bytes_read += table_row_bytes();
    lock.unlock();
    if (config_.row_cache) {
      decode_from_table(id, row.data());
    } else {
      // No cache to fill: read the row's bytes so its pages are resident when asked for (an
      // interleaved table's group, approximately).
      const auto* p = static_cast<const volatile std::byte*>(table_data()) + size_t(id) * table_row_bytes();
      std::byte sink{};
      for (size_t i = 0; i < table_row_bytes(); i += 64) sink ^= p[i];
      (void)sink;
    }
    lock.lock();
    if (config_.row_cache) insert_row(id, row.data());
  }
}

PerLayerInputStats PerLayerInputs::stats() const {
  std::lock_guard lock(mutex_);
  PerLayerInputStats s = stats_;
  s.row_entries = rows_.size();
  s.row_bytes = uint64_t(row_cache_bytes_used_);
  s.hot_entries = hot_.size();
  s.hot_bytes = uint64_t(hot_bytes_used_);
  return s;
}

void PerLayerInputs::reset_stats() {
  std::lock_guard lock(mutex_);
  stats_ = {};
}

}  // namespace lumen::model
