// Lumen's packed .lmp file: the fixed header, the JSON header and tensor table, the model
// spec from its config, and the binding of its tensors to that spec.
#include <cstdint>

#include "formats/packed.h"
#include "fuzz_support.h"
#include "model/weights.h"
#include "spec/model_spec.h"

using namespace lumen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_clean([&] {
    const auto packed = formats::PackedFile::parse(reinterpret_cast<const std::byte*>(data), size, "fuzz.lmp");
    for (const std::string& name : packed->names()) fuzz::touch(packed->find(name)->data, packed->find(name)->nbytes);
    const spec::ModelSpec spec = spec::spec_from_hf_config(packed->config(), "fuzz.lmp");
    (void)model::bind_weights(
        spec, [&](const std::string& name) { return packed->find(name); }, packed->names(), "fuzz.lmp");
  });
  return 0;
}
