// One place that turns a KvConfig into a cache for one sequence.
#pragma once

#include <memory>

#include "base/error.h"
#include "kv/contiguous_cache.h"
#include "kv/kv_config.h"
#include "kv/paged_cache.h"

namespace lumen::kv {

// Contiguous layout: a ContiguousCache at config.dtype; paged: a PagedCache. `max_context`
// (0 = the model's max positions) is checked against config.memory_limit first.
inline std::unique_ptr<model::SequenceKv> make_cache(const spec::ModelSpec& spec, const KvConfig& config,
                                                     int64_t max_context = 0, std::shared_ptr<KvPool> pool = nullptr) {
  if (config.layout == KvLayout::Contiguous) {
    check_context_fits(spec, config, max_context > 0 ? max_context : spec.max_positions);
    return std::make_unique<ContiguousCache>(spec, config.dtype);
  }
  return std::make_unique<PagedCache>(spec, config, std::move(pool), max_context);
}

// A cache holding the first `n` positions of `cache`, which goes on independently: a paged
// cache shares its pages (copy on write), a contiguous one is copied. Several sequences that
// share a prompt (n choices) run it once this way.
inline std::unique_ptr<model::SequenceKv> fork_cache(const model::SequenceKv& cache, int32_t n) {
  if (const auto* paged = dynamic_cast<const PagedCache*>(&cache)) return paged->fork(n);
  if (const auto* contiguous = dynamic_cast<const ContiguousCache*>(&cache)) return contiguous->fork(n);
  throw Error("KV cache: this kind of cache cannot be forked");
}

}  // namespace lumen::kv
