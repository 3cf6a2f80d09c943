// A tensor as a file holds it: name, element type, shape and a pointer into mapped memory.
// The formats layer only locates bytes; it knows nothing of what the numbers mean.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.h"

namespace lumen::formats {

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // valid while the owning reader lives
  size_t nbytes = 0;
  std::string file;  // path of the file that holds it, for error messages
  // Non-empty for a tensor stored in a quantized layout (a quant::format_name(), e.g.
  // "q4_0x4"): `shape` is then the logical shape and `dtype` is U8 (raw bytes).
  std::string storage_format;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// "[3840, 262144]"
std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace lumen::formats
