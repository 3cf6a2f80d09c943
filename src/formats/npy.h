// Writes NumPy .npy files (format 1.0, little-endian f32, C order). The file is written to
// a temporary name beside the target and renamed, so a failure never leaves half a file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lumen::formats {

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape);

}  // namespace lumen::formats
