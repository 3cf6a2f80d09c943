// A bare TFLite model (FlatBuffer "TFL3"): subgraphs, tensors, quantization, buffers,
// signatures, external buffers; every located buffer read.
#include <cstdint>

#include "formats/tflite.h"
#include "fuzz_support.h"

using namespace lumen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_clean([&] {
    const auto model = formats::TfliteModel::parse(reinterpret_cast<const std::byte*>(data), size, "fuzz.tflite");
    for (const auto& sg : model.subgraphs)
      for (const auto& t : sg.tensors) {
        const auto bytes = model.tensor_bytes(t);
        fuzz::touch(bytes.data(), bytes.size());
        (void)formats::TfliteModel::expected_bytes(t);
        if (t.quantization) (void)formats::quantization_summary(*t.quantization);
      }
    (void)formats::tflite_to_text(model);
    (void)formats::tflite_to_json(model).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // as `lumen inspect --json`
  });
  return 0;
}
