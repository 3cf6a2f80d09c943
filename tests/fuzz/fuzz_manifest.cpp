// A doppler.execution/v1 manifest -> ModelSpec, its KV cache settings, and the field table
// `lumen inspect --manifest` prints (which promises never to throw on a JSON object).
#include <cstdint>
#include <string_view>

#include "base/json.h"
#include "fuzz_support.h"
#include "kv/kv_config.h"
#include "runtime/manifest_fields.h"
#include "spec/model_spec.h"

using namespace lumen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json doc;
  try {
    doc = parse_json(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  fuzz::expect_clean([&] {
    const spec::ModelSpec spec = spec::spec_from_manifest(doc, "fuzz/manifest.json");
    (void)spec::spec_to_text(spec);
    (void)spec::expected_tensors(spec);
  });
  const nlohmann::json* kvcache = &doc;
  for (const char* key : {"runtime", "manifestInference", "session", "kvcache"})
    kvcache = kvcache != nullptr && kvcache->is_object() && kvcache->contains(key) ? &(*kvcache)[key] : nullptr;
  if (kvcache != nullptr)
    fuzz::expect_clean([&] {
      (void)kv::kv_config_from_json(*kvcache, "fuzz/manifest.json", "runtime.manifestInference.session.kvcache");
    });
  if (doc.is_object()) {
    try {
      const runtime::FieldTable table = runtime::manifest_field_table(doc, "fuzz/manifest.json");
      (void)runtime::field_table_to_text(table);
      (void)runtime::field_table_to_json(table).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    } catch (const std::exception& e) {
      fuzz::crash(std::string("manifest_field_table threw on a JSON object: ") + e.what());
    }
  }
  return 0;
}
