// A Hugging Face config.json (Gemma 4 and Gemma 3 layouts) -> ModelSpec, and what is
// derived from a spec before any weight is read: the expected tensors, the KV footprint.
#include <cstdint>
#include <string_view>

#include "base/json.h"
#include "fuzz_support.h"
#include "kv/kv_config.h"
#include "spec/model_spec.h"

using namespace lumen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json doc;
  try {
    doc = parse_json(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const nlohmann::json::exception&) {
    return 0;  // the JSON parser is nlohmann's; the spec builder is what is fuzzed here
  }
  fuzz::expect_clean([&] {
    const spec::ModelSpec spec = spec::spec_from_hf_config(doc, "fuzz/config.json");
    (void)spec::spec_to_text(spec);
    (void)spec::spec_to_json(spec).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    (void)spec::expected_tensors(spec);
    const kv::KvConfig config;
    kv::validate_kv_config(config, spec);
    (void)kv::kv_footprint(spec, config).bytes_at(spec.max_positions);
  });
  return 0;
}
