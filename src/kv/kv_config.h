// How a sequence's keys and values are kept: precision, layout, page size, tiering.
// Built from a manifest's `session.kvcache` block (every field honoured or refused) or
// from defaults; and the memory it will take at a given context, so a context that does
// not fit is refused before the first token rather than by an allocation failure later.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "spec/model_spec.h"

namespace lumen::kv {

// Storage element of cached rows. Int8/Int4 are symmetric block quantization with one f32
// scale per `block_size` consecutive elements of a head (cold tier only).
enum class KvElem : uint8_t { F32, F16, BF16, Int8, Int4 };

enum class KvLayout : uint8_t {
  Contiguous,  // one growing array per layer; keeps every position (the simple reference)
  Paged,       // pages of page_size positions from a pool; sliding layers keep a ring of pages
};

struct KvConfig {
  KvElem dtype = KvElem::F32;
  KvLayout layout = KvLayout::Paged;
  int page_size = 256;
  // Tiering of unbounded (full-attention) layers: pages whose positions are all older than
  // the last `hot_window` positions move to the cold tier (`cold`, possibly Int8/Int4).
  bool tiering = false;
  int hot_window = 1024;
  KvElem cold = KvElem::F16;
  int block_size = 32;
  // Bytes the cache may take; 0 = no limit.
  int64_t memory_limit = 0;
};

const char* kv_elem_name(KvElem e);
std::optional<KvElem> kv_elem_from_name(const std::string& name);  // f32 f16 bf16 int8 int4
std::string kv_config_to_text(const KvConfig& c);

// Parses a `session.kvcache` object; `where` is its dotted path for error messages
// ("MANIFEST: runtime.manifestInference.session.kvcache.kvDtype: ...").
KvConfig kv_config_from_json(const nlohmann::json& kvcache, const std::string& source, const std::string& where);

// The manifest's kvcache block when `path` is a doppler.execution/v1 manifest that has one;
// defaults for a model directory or config.json.
KvConfig load_kv_config(const std::string& path);

// Throws lumen::Error if the config cannot hold this model (block size not dividing a head,
// odd sizes for int4, page size < 1 ...).
void validate_kv_config(const KvConfig& c, const spec::ModelSpec& spec);

// Bytes one cached row (all KV heads of one position, keys and values) takes at `e`.
int64_t kv_row_bytes(KvElem e, int64_t row_elems, int block_size);

struct KvFootprint {
  int page_size = 0;
  int64_t unbounded_hot_bytes_per_token = 0;   // full layers, all of them, at dtype
  int64_t unbounded_cold_bytes_per_token = 0;  // full layers in the cold tier (= hot when off)
  int64_t bounded_bytes_per_token = 0;         // sliding layers, per position they hold
  int64_t bounded_max_positions = 0;           // positions a sliding layer holds at most
  int64_t hot_positions = 0;                   // full-layer positions kept hot (tiering on)
  bool tiering = false;
  bool contiguous = false;
  // Bytes the cache of one sequence takes at `context` positions (page granular).
  int64_t bytes_at(int64_t context) const;
  // Bytes per token of context, averaged, at `context`.
  double bytes_per_token_at(int64_t context) const { return context > 0 ? double(bytes_at(context)) / double(context) : 0; }
};

KvFootprint kv_footprint(const spec::ModelSpec& spec, const KvConfig& c);

// Throws "KV cache for N positions needs X MiB, over the limit of Y MiB (...)" when the
// config's memory limit cannot hold `context` positions.
void check_context_fits(const spec::ModelSpec& spec, const KvConfig& c, int64_t context);

}  // namespace lumen::kv
