// lumen inspect PATH [--json]: what Lumen reads from a file. A LiteRT-LM package (magic
// "LITERTLM") or a TFLite model (identifier "TFL3" at bytes 4-7) is listed in full: version,
// metadata, sections, tensors, signatures. Anything else is a model directory, config.json or
// manifest, shown as the model spec Lumen derives from it. Dispatch is on the bytes, not the
// file name (the extension only picks the reader when the bytes match neither).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "formats/litertlm.h"
#include "formats/tflite.h"
#include "spec/model_spec.h"

namespace {

struct InspectOptions {
  std::string path;
  bool json = false;
};

enum class FileKind { Litertlm, Tflite, Other };

FileKind sniff(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return FileKind::Other;
  std::ifstream in(path, std::ios::binary);
  char head[8] = {};
  in.read(head, sizeof head);
  if (in.gcount() == 8 && std::memcmp(head, "LITERTLM", 8) == 0) return FileKind::Litertlm;
  if (in.gcount() == 8 && std::memcmp(head + 4, "TFL3", 4) == 0) return FileKind::Tflite;
  // Bytes that match neither: the extension picks the reader whose error will explain.
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".litertlm") return FileKind::Litertlm;
  if (ext == ".tflite") return FileKind::Tflite;
  return FileKind::Other;
}

LUMEN_COMMAND(50, [](CLI::App& app) {
  auto opts = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand(
      "inspect", "List a .litertlm package or .tflite model, or print the model spec of a model directory, config.json or manifest");
  cmd->add_option("path", opts->path, ".litertlm, .tflite, model directory, config.json or doppler.execution/v1 manifest")->required();
  cmd->add_flag("--json", opts->json, "Print JSON instead of text");
  return std::pair{cmd, lumen::cli::Runner([opts] {
    switch (sniff(opts->path)) {
      case FileKind::Litertlm: {
        const auto file = lumen::formats::LitertlmFile::open(opts->path);
        if (opts->json) std::cout << lumen::formats::litertlm_to_json(file).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        else std::cout << lumen::formats::litertlm_to_text(file);
        return 0;
      }
      case FileKind::Tflite: {
        const auto file = lumen::formats::TfliteFile::open(opts->path);
        if (opts->json) {
          nlohmann::json j = lumen::formats::tflite_to_json(file.model());
          j["format"] = "tflite";
          j["path"] = opts->path;
          std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        } else {
          std::cout << "TFLite model " << opts->path << "\n" << lumen::formats::tflite_to_text(file.model());
        }
        return 0;
      }
      case FileKind::Other: break;
    }
    const lumen::spec::ModelSpec spec = lumen::spec::load_spec(opts->path);
    if (opts->json) std::cout << lumen::spec::spec_to_json(spec).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    else std::cout << lumen::spec::spec_to_text(spec);
    return 0;
  })};
});

}  // namespace
