// `lumen inspect` for LiteRT-LM packages and TFLite models (kept apart from cmd_inspect.cpp so
// that the spec/KV/GGUF inspection there stays one small dispatch away).
#pragma once

#include <string>

namespace lumen::cli {

// If `path` is a .litertlm package (magic "LITERTLM") or a TFLite model (identifier "TFL3" at
// bytes 4-7) — or, when the bytes match neither, is named *.litertlm / *.tflite so the right
// reader explains what is wrong — prints it (JSON or text) and returns true. Otherwise returns
// false and prints nothing. Throws lumen::Error (one line) on a bad file.
bool inspect_litert_file(const std::string& path, bool json);

}  // namespace lumen::cli
