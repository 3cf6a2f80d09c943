// GGUF: header, metadata, tensor table; the model spec from the metadata; the binding of the
// tensors to that spec (norm gains read, matrix sizes checked); the tokenizer metadata.
#include <cstdint>

#include "formats/gguf.h"
#include "fuzz_support.h"
#include "model/weights.h"
#include "spec/model_spec.h"

using namespace lumen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_clean([&] {
    const auto file = formats::GgufFile::parse(reinterpret_cast<const std::byte*>(data), size, "fuzz.gguf");
    for (const auto& tensor : file.tensors()) fuzz::touch(tensor.data, tensor.nbytes);
    for (const auto& [key, value] : file.metadata()) {
      (void)value.summary();
      if (const auto* array = value.array()) {
        (void)array->to_ints();
        (void)array->to_floats();
        if (!array->empty()) (void)array->at(array->size() - 1);
      }
    }
    fuzz::expect_clean([&] { (void)file.tokenizer(); });
    const spec::ModelSpec spec = spec::spec_from_gguf(file);
    (void)spec::spec_to_json(spec);
    (void)model::bind_gguf_weights(spec, file);
  });
  return 0;
}
