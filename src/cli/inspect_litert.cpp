#include "cli/inspect_litert.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "formats/litertlm.h"
#include "formats/tflite.h"

namespace lumen::cli {

namespace {

enum class FileKind { Litertlm, Tflite, Other };

// Dispatch is on the bytes, not the name; the extension only decides when the bytes match
// neither (so a damaged x.litertlm says "bad magic", not "not valid JSON").
FileKind sniff(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return FileKind::Other;
  std::ifstream in(path, std::ios::binary);
  char head[8] = {};
  in.read(head, sizeof head);
  if (in.gcount() == 8 && std::memcmp(head, "LITERTLM", 8) == 0) return FileKind::Litertlm;
  if (in.gcount() == 8 && std::memcmp(head + 4, "TFL3", 4) == 0) return FileKind::Tflite;
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".litertlm") return FileKind::Litertlm;
  if (ext == ".tflite") return FileKind::Tflite;
  return FileKind::Other;
}

void print_json(const nlohmann::json& j) {
  // Tensor names come from the file: invalid UTF-8 is replaced rather than thrown on.
  std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

}  // namespace

bool inspect_litert_file(const std::string& path, bool json) {
  switch (sniff(path)) {
    case FileKind::Litertlm: {
      const auto file = formats::LitertlmFile::open(path);
      if (json) print_json(formats::litertlm_to_json(file));
      else std::cout << formats::litertlm_to_text(file);
      return true;
    }
    case FileKind::Tflite: {
      const auto file = formats::TfliteFile::open(path);
      if (json) {
        nlohmann::json j = formats::tflite_to_json(file.model());
        j["format"] = "tflite";
        j["path"] = path;
        print_json(j);
      } else {
        std::cout << "TFLite model " << path << "\n" << formats::tflite_to_text(file.model());
      }
      return true;
    }
    case FileKind::Other: break;
  }
  return false;
}

}  // namespace lumen::cli
