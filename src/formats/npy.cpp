#include "formats/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/error.h"
#include "formats/temp_files.h"

namespace lumen::formats {

void write_npy_f32(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
  std::string dims;
  size_t count = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dims += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) dims += ", ";
    count *= size_t(shape[i]);
  }
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + length (2) + header, padded with spaces to a multiple of 64, ending in '\n'.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';

  TempFile file(path);  // removed (and unregistered) unless committed
  FILE* f = std::fopen(file.temp_path().c_str(), "wb");
  if (!f) throw Error("cannot write '" + path + "': " + std::strerror(errno));
  const uint16_t header_len = uint16_t(header.size());
  const unsigned char preamble[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  bool ok = std::fwrite(preamble, 1, 8, f) == 8 &&
            std::fwrite(&header_len, 2, 1, f) == 1 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            std::fwrite(data, sizeof(float), count, f) == count;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw Error("cannot write '" + path + "': write failed");
  file.commit();
}

}  // namespace lumen::formats
