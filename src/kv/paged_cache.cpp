#include "kv/paged_cache.h"

#include <algorithm>
#include <sstream>
#include <string>

#include "base/error.h"
#include "kv/row_codec.h"

namespace lumen::kv {
namespace {
// Rows decoded per visit from a non-f32 page: a tile that stays in the L1/L2 cache.
constexpr int32_t kDecodeTile = 32;
// Recycled page buffers kept for reuse at most.
constexpr size_t kMaxFreeBuffers = 64;

std::string mib(int64_t bytes) {
  std::ostringstream o;
  o.precision(1);
  o << std::fixed << double(bytes) / (1 << 20) << " MiB";
  return o.str();
}
}  // namespace

std::vector<uint8_t> KvPool::take(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (limit_ > 0 && in_use_ + bytes > limit_)
    throw Error("KV cache: out of its memory limit of " + mib(limit_) + " (" + mib(in_use_) +
                " in use); use a shorter context or a smaller kvDtype / tiering");
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  for (size_t i = free_.size(); i-- > 0;) {
    if (int64_t(free_[i].size()) == bytes) {
      std::vector<uint8_t> buf = std::move(free_[i]);
      free_.erase(free_.begin() + int64_t(i));
      free_bytes_ -= bytes;
      return buf;
    }
  }
  return std::vector<uint8_t>(size_t(bytes));
}

void KvPool::give_back(std::vector<uint8_t>&& buffer) {
  std::lock_guard<std::mutex> lock(mutex_);
  in_use_ -= int64_t(buffer.size());
  if (free_.size() < kMaxFreeBuffers) {
    free_bytes_ += int64_t(buffer.size());
    free_.push_back(std::move(buffer));
  }
}

int64_t KvPool::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

int64_t KvPool::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

struct PagedCache::Page {
  KvElem elem = KvElem::F32;
  int64_t row_bytes = 0;
  std::vector<uint8_t> k, v;
  std::shared_ptr<KvPool> pool;
  ~Page() {
    pool->give_back(std::move(k));
    pool->give_back(std::move(v));
  }
};

PagedCache::PagedCache(const spec::ModelSpec& spec, const KvConfig& config, std::shared_ptr<KvPool> pool,
                       int64_t max_context)
    : config_(config), pool_(pool ? std::move(pool) : std::make_shared<KvPool>(config.memory_limit)) {
  validate_kv_config(config_, spec);
  const int64_t context = max_context > 0 ? max_context : spec.max_positions;
  if (context > 0) check_context_fits(spec, config_, context);
  for (const auto& ls : spec.layers) {
    Layer L;
    L.row = int64_t(ls.num_kv_heads) * ls.head_dim;
    L.head_dim = ls.head_dim;
    L.window = ls.window;
    L.tiered = config_.tiering && ls.window <= 0;
    L.shared = !ls.stores_kv();  // reads another layer's pages, holds none
    layers_.push_back(std::move(L));
  }
}

PagedCache::~PagedCache() = default;

std::shared_ptr<PagedCache::Page> PagedCache::new_page(const Layer& L, KvElem elem) const {
  auto page = std::make_shared<Page>();
  page->elem = elem;
  page->pool = pool_;
  page->row_bytes = row_bytes(elem, L.row, config_.block_size);
  const int64_t bytes = page->row_bytes * config_.page_size;
  page->k = pool_->take(bytes);
  try {
    page->v = pool_->take(bytes);
  } catch (...) {
    pool_->give_back(std::move(page->k));
    page->k.clear();
    page->pool = std::make_shared<KvPool>();  // the destructor returns nothing more to pool_
    throw;
  }
  return page;
}

PagedCache::Page& PagedCache::writable_page(Layer& L, size_t index) {
  std::shared_ptr<Page>& page = L.pages[index];
  if (page->elem == config_.dtype && page.use_count() == 1) return *page;
  // Shared with a fork or a prefix snapshot, or demoted to the cold tier: copy first.
  std::shared_ptr<Page> fresh = new_page(L, config_.dtype);
  const int64_t start = int64_t(L.first_page + int64_t(index)) * config_.page_size;
  const int64_t valid = std::clamp<int64_t>(L.length - start, 0, config_.page_size);
  std::vector<float> row(size_t(L.row));
  for (int64_t r = 0; r < valid; ++r) {
    decode_row_slice(page->elem, page->k.data() + r * page->row_bytes, L.row, config_.block_size, 0, L.row, row.data());
    encode_row(fresh->elem, row.data(), L.row, config_.block_size, fresh->k.data() + r * fresh->row_bytes);
    decode_row_slice(page->elem, page->v.data() + r * page->row_bytes, L.row, config_.block_size, 0, L.row, row.data());
    encode_row(fresh->elem, row.data(), L.row, config_.block_size, fresh->v.data() + r * fresh->row_bytes);
  }
  page = std::move(fresh);
  L.cold_count = std::min(L.cold_count, int32_t(index));
  return *page;
}

void PagedCache::rewind(Layer& L, int32_t pos) {
  const int64_t ps = config_.page_size;
  if (pos == 0) {  // starting over needs nothing held
    L.pages.clear();
    L.first_page = 0;
    L.cold_count = 0;
    L.length = 0;
    return;
  }
  if (L.window > 0) {
    const int64_t need = std::max<int64_t>(0, int64_t(pos) - L.window + 1);
    if (need < int64_t(L.first_page) * ps)
      throw Error("KV cache: cannot go back to position " + std::to_string(pos) +
                  ": a sliding layer no longer holds positions before " + std::to_string(int64_t(L.first_page) * ps));
  }
  const int64_t keep = (int64_t(pos) + ps - 1) / ps - L.first_page;  // pages with a position < pos
  if (keep < int64_t(L.pages.size())) L.pages.resize(size_t(std::max<int64_t>(keep, 0)));
  L.cold_count = std::min(L.cold_count, int32_t(L.pages.size()));
  L.length = pos;
}

void PagedCache::demote(Layer& L) {
  if (!L.tiered) return;
  const int64_t ps = config_.page_size;
  const int64_t hot_from = int64_t(L.length) - config_.hot_window;
  std::vector<float> row;
  while (L.cold_count + 1 < int32_t(L.pages.size())) {
    const int64_t page_end = (int64_t(L.first_page) + L.cold_count + 1) * ps;
    if (page_end > hot_from) break;
    std::shared_ptr<Page>& page = L.pages[size_t(L.cold_count)];
    if (page->elem != config_.cold) {
      // A shared page is left as it is for its other holders; this cache gets a cold copy.
      std::shared_ptr<Page> cold = new_page(L, config_.cold);
      row.resize(size_t(L.row));
      for (int64_t r = 0; r < ps; ++r) {
        decode_row_slice(page->elem, page->k.data() + r * page->row_bytes, L.row, config_.block_size, 0, L.row, row.data());
        encode_row(cold->elem, row.data(), L.row, config_.block_size, cold->k.data() + r * cold->row_bytes);
        decode_row_slice(page->elem, page->v.data() + r * page->row_bytes, L.row, config_.block_size, 0, L.row, row.data());
        encode_row(cold->elem, row.data(), L.row, config_.block_size, cold->v.data() + r * cold->row_bytes);
      }
      page = std::move(cold);
    }
    ++L.cold_count;
  }
}

void PagedCache::store(int layer, int32_t pos, const float* k, const float* v) {
  Layer& L = layers_.at(size_t(layer));
  if (pos > L.length)
    throw Error("KV cache: position " + std::to_string(pos) + " stored before position " + std::to_string(L.length));
  if (pos < L.length) rewind(L, pos);
  const int32_t ps = config_.page_size;
  if (L.pages.empty()) L.first_page = pos / ps;
  const int64_t index = int64_t(pos / ps) - L.first_page;
  if (index == int64_t(L.pages.size())) L.pages.push_back(new_page(L, config_.dtype));
  Page& page = writable_page(L, size_t(index));
  const int64_t at = int64_t(pos % ps) * page.row_bytes;
  encode_row(page.elem, k, L.row, config_.block_size, page.k.data() + at);
  encode_row(page.elem, v, L.row, config_.block_size, page.v.data() + at);
  L.length = pos + 1;
  demote(L);
}

template <class Fn>
void PagedCache::visit_tiles(const Layer& L, int32_t lo, int32_t hi, bool whole_rows, Fn&& fn) const {
  const int32_t ps = config_.page_size;
  const int64_t first_held = int64_t(L.first_page) * ps;
  if (lo < first_held || hi >= L.length || lo > hi)
    throw Error("KV cache: read of positions " + std::to_string(lo) + ".." + std::to_string(hi) + " but positions " +
                std::to_string(first_held) + ".." + std::to_string(L.length - 1) + " are held");
  (void)whole_rows;
  for (int32_t pos = lo; pos <= hi;) {
    const Page& page = *L.pages[size_t(pos / ps - L.first_page)];
    const int32_t in_page = pos % ps;
    const int32_t n = std::min(hi - pos + 1, ps - in_page);
    fn(page, in_page, n, pos);
    pos += n;
  }
}

void PagedCache::read(int layer, int32_t lo, int32_t hi, const model::KvVisitor& visit) const {
  const Layer& L = layers_.at(size_t(layer));
  thread_local std::vector<float> kt, vt;
  visit_tiles(L, lo, hi, true, [&](const Page& page, int32_t in_page, int32_t n, int32_t pos) {
    if (page.elem == KvElem::F32) {
      const auto* k = reinterpret_cast<const float*>(page.k.data()) + int64_t(in_page) * L.row;
      const auto* v = reinterpret_cast<const float*>(page.v.data()) + int64_t(in_page) * L.row;
      visit(model::KvSpan{pos, n, k, v, L.row});
      return;
    }
    for (int32_t t = 0; t < n; t += kDecodeTile) {
      const int32_t m = std::min(kDecodeTile, n - t);
      kt.resize(size_t(m * L.row));
      vt.resize(size_t(m * L.row));
      for (int32_t r = 0; r < m; ++r) {
        const int64_t at = int64_t(in_page + t + r) * page.row_bytes;
        decode_row_slice(page.elem, page.k.data() + at, L.row, config_.block_size, 0, L.row, kt.data() + r * L.row);
        decode_row_slice(page.elem, page.v.data() + at, L.row, config_.block_size, 0, L.row, vt.data() + r * L.row);
      }
      visit(model::KvSpan{pos + t, m, kt.data(), vt.data(), L.row});
    }
  });
}

void PagedCache::read_head(int layer, int kv_head, int32_t lo, int32_t hi, const model::KvVisitor& visit) const {
  const Layer& L = layers_.at(size_t(layer));
  const int64_t hd = L.head_dim, off = int64_t(kv_head) * hd;
  thread_local std::vector<float> kt, vt;
  visit_tiles(L, lo, hi, false, [&](const Page& page, int32_t in_page, int32_t n, int32_t pos) {
    if (page.elem == KvElem::F32) {
      const auto* k = reinterpret_cast<const float*>(page.k.data()) + int64_t(in_page) * L.row + off;
      const auto* v = reinterpret_cast<const float*>(page.v.data()) + int64_t(in_page) * L.row + off;
      visit(model::KvSpan{pos, n, k, v, L.row});
      return;
    }
    // Decoded on the fly, one small tile of this head at a time.
    for (int32_t t = 0; t < n; t += kDecodeTile) {
      const int32_t m = std::min(kDecodeTile, n - t);
      kt.resize(size_t(m * hd));
      vt.resize(size_t(m * hd));
      for (int32_t r = 0; r < m; ++r) {
        const int64_t at = int64_t(in_page + t + r) * page.row_bytes;
        decode_row_slice(page.elem, page.k.data() + at, L.row, config_.block_size, off, hd, kt.data() + r * hd);
        decode_row_slice(page.elem, page.v.data() + at, L.row, config_.block_size, off, hd, vt.data() + r * hd);
      }
      visit(model::KvSpan{pos + t, m, kt.data(), vt.data(), hd});
    }
  });
}

void PagedCache::release_before(int layer, int32_t pos) {
  Layer& L = layers_.at(size_t(layer));
  pos = std::min(pos, L.length);
  const int64_t ps = config_.page_size;
  size_t drop = 0;
  while (drop < L.pages.size() && (int64_t(L.first_page) + int64_t(drop) + 1) * ps <= pos) ++drop;
  if (drop == 0) return;
  L.pages.erase(L.pages.begin(), L.pages.begin() + int64_t(drop));
  L.first_page += int32_t(drop);
  L.cold_count = std::max<int32_t>(0, L.cold_count - int32_t(drop));
}

int32_t PagedCache::length() const { return layers_.empty() ? 0 : layers_[0].length; }

void PagedCache::clear() {
  for (auto& L : layers_) {
    L.pages.clear();
    L.first_page = 0;
    L.cold_count = 0;
    L.length = 0;
  }
}

int32_t PagedCache::resumable_length(int32_t want) const {
  int32_t n = std::max<int32_t>(want, 0);
  for (const auto& L : layers_)
    if (!L.shared) n = std::min(n, L.length);
  for (const auto& L : layers_) {
    if (L.window <= 0 || L.shared) continue;
    const int64_t need = std::max<int64_t>(0, int64_t(n) - L.window + 1);
    if (need < int64_t(L.first_page) * config_.page_size) return 0;
  }
  return n;
}

std::unique_ptr<PagedCache> PagedCache::fork(int32_t n) const {
  if (resumable_length(n) != n)
    throw Error("KV cache: cannot fork at position " + std::to_string(n) + " (resumable up to " +
                std::to_string(resumable_length(n)) + ")");
  std::unique_ptr<PagedCache> copy(new PagedCache(*this));
  const int64_t ps = config_.page_size;
  for (auto& L : copy->layers_) {
    const int64_t keep = std::max<int64_t>(0, (int64_t(n) + ps - 1) / ps - L.first_page);
    if (keep < int64_t(L.pages.size())) L.pages.resize(size_t(keep));
    if (L.pages.empty()) L.first_page = int32_t(n / ps);
    L.cold_count = std::min(L.cold_count, int32_t(L.pages.size()));
    L.length = n;
  }
  return copy;
}

int64_t PagedCache::bytes() const {
  int64_t total = 0;
  for (const auto& L : layers_)
    for (const auto& p : L.pages) total += int64_t(p->k.size() + p->v.size());
  return total;
}

int PagedCache::pages_held(int layer) const { return int(layers_.at(size_t(layer)).pages.size()); }

int PagedCache::cold_pages(int layer) const {
  int n = 0;
  for (const auto& p : layers_.at(size_t(layer)).pages) n += p->elem == config_.cold && config_.tiering ? 1 : 0;
  return n;
}

}  // namespace lumen::kv
