// One .safetensors file: the header length, the JSON header, every tensor's range.
#include <cstdint>

#include "formats/safetensors.h"
#include "fuzz_support.h"

using namespace lumen;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_clean([&] {
    const auto ckpt =
        formats::SafetensorsCheckpoint::parse(reinterpret_cast<const std::byte*>(data), size, "fuzz.safetensors");
    for (const std::string& name : ckpt.names()) {
      const formats::TensorView* view = ckpt.find(name);
      if (view == nullptr) fuzz::crash("names() lists '" + name + "' but find() does not");
      fuzz::touch(view->data, view->nbytes);
    }
  });
  return 0;
}
