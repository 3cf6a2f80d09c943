// The paged KV cache. Per layer, a table of pages of `page_size` positions, taken on demand
// from a pool and shared by reference count:
// - full-attention layers keep every page (unbounded); with tiering, pages whose positions
//   have all left the last `hot_window` are re-encoded in the cold tier (f16/bf16/f32 or
//   int8/int4 blocks) and decoded tile by tile when attention reads them;
// - sliding layers keep a ring: pages the window has left are returned to the pool, so their
//   memory is bounded by the window whatever the context length.
// fork() makes another cache that shares this one's pages (copy on write): the basis of
// prefix reuse.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "kv/kv_config.h"
#include "model/kv_store.h"
#include "spec/model_spec.h"

namespace lumen::kv {

// Accounts for the bytes of every page it hands out, refuses to go over its limit, and
// recycles page buffers. Shared by every cache (and prefix snapshot) drawing on it.
class KvPool {
 public:
  explicit KvPool(int64_t limit_bytes = 0) : limit_(limit_bytes) {}
  std::vector<uint8_t> take(int64_t bytes);  // throws lumen::Error over the limit
  void give_back(std::vector<uint8_t>&& buffer);
  int64_t bytes_in_use() const;
  int64_t peak_bytes() const;
  int64_t limit() const { return limit_; }

 private:
  mutable std::mutex mutex_;
  int64_t limit_ = 0;
  int64_t in_use_ = 0;
  int64_t peak_ = 0;
  std::vector<std::vector<uint8_t>> free_;
  int64_t free_bytes_ = 0;
};

class PagedCache final : public model::SequenceKv {
 public:
  // `max_context` (0 = the model's max positions) is checked against config.memory_limit
  // up front. A null pool means a private one with the config's limit.
  PagedCache(const spec::ModelSpec& spec, const KvConfig& config, std::shared_ptr<KvPool> pool = nullptr,
             int64_t max_context = 0);
  ~PagedCache() override;

  void store(int layer, int32_t pos, const float* k, const float* v) override;
  void read(int layer, int32_t lo, int32_t hi, const model::KvVisitor& visit) const override;
  void read_head(int layer, int kv_head, int32_t lo, int32_t hi, const model::KvVisitor& visit) const override;
  void release_before(int layer, int32_t pos) override;
  int32_t length() const override;
  void clear();

  // Largest n <= want at which a fork can resume: every layer holds n positions and every
  // sliding layer still holds the window before n. 0 when none.
  int32_t resumable_length(int32_t want) const override;
  // A cache holding this one's first `n` positions, sharing its pages (the first write to
  // a shared page copies it). Throws if resumable_length(n) != n.
  std::unique_ptr<PagedCache> fork(int32_t n) const;

  const KvConfig& config() const { return config_; }
  const std::shared_ptr<KvPool>& pool() const { return pool_; }
  // Bytes of the pages this cache references (shared pages counted in full).
  int64_t bytes() const;
  // Pages of layer `layer` held, and how many of those are in the cold tier.
  int pages_held(int layer) const;
  int cold_pages(int layer) const;

 private:
  struct Page;
  struct Layer {
    int64_t row = 0;  // elements per position (kv heads x head dim)
    int head_dim = 0;
    int window = 0;   // > 0: sliding (ring of pages)
    bool tiered = false;
    bool shared = false;  // a KV-shared layer: stores nothing (the graph reads its source layer)
    std::vector<std::shared_ptr<Page>> pages;  // pages[i] covers page index first_page + i
    int32_t first_page = 0;
    int32_t cold_count = 0;  // pages[0 .. cold_count) have been demoted
    int32_t length = 0;
  };
  PagedCache(const PagedCache&) = default;
  std::shared_ptr<Page> new_page(const Layer& L, KvElem elem) const;
  Page& writable_page(Layer& L, size_t index);
  void rewind(Layer& L, int32_t pos);
  void demote(Layer& L);
  template <class Fn>
  void visit_tiles(const Layer& L, int32_t lo, int32_t hi, bool whole_rows, Fn&& fn) const;

  KvConfig config_;
  std::shared_ptr<KvPool> pool_;
  std::vector<Layer> layers_;
};

}  // namespace lumen::kv
