// Prefix reuse: remembers the KV pages of token sequences already prefilled and hands a new
// sequence a cache forked at the longest prefix it shares with one of them, so only the
// remaining tokens need a forward pass. Pages are shared by reference count and copied on
// the first write (PagedCache::fork). Sliding layers keep only a ring, so an entry can
// resume at its own length or slightly before it (PagedCache::resumable_length); insert
// at the points where later requests will branch (e.g. after a system prompt, or after
// each prompt) to make those prefixes reusable. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "kv/paged_cache.h"

namespace lumen::kv {

class PrefixCache {
 public:
  // Entries beyond max_entries are dropped least recently used first. New caches draw from
  // `pool` (a private one with config.memory_limit when null).
  PrefixCache(const spec::ModelSpec& spec, KvConfig config, size_t max_entries = 16,
              std::shared_ptr<KvPool> pool = nullptr);

  // Remembers `cache`'s first min(tokens.size(), cache.length()) positions as the KV of
  // those tokens (a snapshot sharing its pages; later writes to `cache` do not change it).
  void insert(std::span<const int32_t> tokens, const PagedCache& cache);

  struct Match {
    std::unique_ptr<PagedCache> cache;  // holds the first `reused` positions of the tokens
    int32_t reused = 0;
  };
  // A cache for `tokens`: forked at the longest reusable cached prefix, at most
  // tokens.size() - 1 long so at least one token is left to run for logits; a fresh empty
  // cache when nothing matches.
  Match acquire(std::span<const int32_t> tokens);

  size_t entries() const;
  void clear();
  const std::shared_ptr<KvPool>& pool() const { return pool_; }

 private:
  struct Entry {
    std::vector<int32_t> tokens;
    std::unique_ptr<PagedCache> snapshot;
    uint64_t last_used = 0;
  };
  spec::ModelSpec spec_;
  KvConfig config_;
  size_t max_entries_;
  std::shared_ptr<KvPool> pool_;
  mutable std::mutex mutex_;
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

}  // namespace lumen::kv
