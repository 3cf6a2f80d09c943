#include "kv/prefix_cache.h"

#include <algorithm>

#include "base/error.h"

namespace lumen::kv {

PrefixCache::PrefixCache(const spec::ModelSpec& spec, KvConfig config, size_t max_entries, std::shared_ptr<KvPool> pool)
    : spec_(spec), config_(config), max_entries_(std::max<size_t>(max_entries, 1)),
      pool_(pool ? std::move(pool) : std::make_shared<KvPool>(config.memory_limit)) {
  if (config_.layout != KvLayout::Paged) throw Error("KV cache: prefix reuse needs the paged layout");
  validate_kv_config(config_, spec_);
}

void PrefixCache::insert(std::span<const int32_t> tokens, const PagedCache& cache) {
  const int32_t n = cache.resumable_length(int32_t(std::min<size_t>(tokens.size(), size_t(cache.length()))));
  if (n <= 0) return;
  Entry entry;
  entry.tokens.assign(tokens.begin(), tokens.begin() + n);
  entry.snapshot = cache.fork(n);
  std::lock_guard<std::mutex> lock(mutex_);
  entry.last_used = ++clock_;
  // The same tokens again: the newer snapshot replaces the older one.
  std::erase_if(entries_, [&](const Entry& e) { return e.tokens == entry.tokens; });
  entries_.push_back(std::move(entry));
  while (entries_.size() > max_entries_) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
    entries_.erase(oldest);
  }
}

PrefixCache::Match PrefixCache::acquire(std::span<const int32_t> tokens) {
  Match match;
  const int32_t limit = tokens.empty() ? 0 : int32_t(tokens.size()) - 1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Entry* best = nullptr;
    int32_t best_n = 0;
    for (Entry& e : entries_) {
      const size_t common = size_t(std::mismatch(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end()).first -
                                   e.tokens.begin());
      const int32_t n = e.snapshot->resumable_length(std::min(int32_t(common), limit));
      if (n > best_n) {
        best_n = n;
        best = &e;
      }
    }
    if (best) {
      best->last_used = ++clock_;
      match.cache = best->snapshot->fork(best_n);
      match.reused = best_n;
    }
  }
  if (!match.cache) match.cache = std::make_unique<PagedCache>(spec_, config_, pool_);
  return match;
}

size_t PrefixCache::entries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

void PrefixCache::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
}

}  // namespace lumen::kv
