// lumen imatrix -m MODEL -f TEXT -o imatrix.gguf [--ctx N] [--chunks N]: an importance matrix
// for `lumen quantize --imatrix` (or llama-quantize), in llama.cpp's imatrix GGUF layout.
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "base/error.h"
#include "cli/command.h"
#include "cli/progress.h"
#include "runtime/engine.h"
#include "runtime/imatrix.h"

namespace {

using namespace lumen;

struct ImatrixCliOptions {
  std::string model, file, out = "imatrix.gguf";
  int ctx = 512, chunks = 0;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open for reading");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

LUMEN_COMMAND(73, [](CLI::App& app) {
  auto o = std::make_shared<ImatrixCliOptions>();
  auto* cmd = app.add_subcommand("imatrix", "Importance matrix of a model over a calibration text (llama.cpp's imatrix GGUF)");
  cmd->add_option("-m,--model", o->model, "Model (default: the installed Gemma 3 270M)");
  cmd->add_option("-f,--file", o->file, "Calibration text (UTF-8)")->required();
  cmd->add_option("-o,--output", o->out, "File to write (default imatrix.gguf)");
  cmd->add_option("--ctx", o->ctx, "Tokens per chunk, the BOS included (default 512)");
  cmd->add_option("--chunks", o->chunks, "Use at most N chunks (default: all)")->check(CLI::NonNegativeNumber);
  return std::pair{cmd, lumen::cli::Runner([o] {
    const auto start = std::chrono::steady_clock::now();
    const std::string text = read_text(o->file);
    auto engine = runtime::Engine::load(cli::resolve_model_path(o->model));
    const std::vector<int32_t> ids = engine->require_tokenizer().encode(text, /*parse_special=*/false);
    cli::ProgressBar bar("imatrix");
    runtime::ImatrixOptions io{o->ctx, o->chunks, o->file};
    const quant::Imatrix m = runtime::collect_imatrix(*engine, ids, io, [&](int done, int total) {
      bar.update(uint64_t(done), uint64_t(total), fmt::format("{}/{} chunks", done, total));
    });
    quant::write_imatrix(o->out, m);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("wrote {} ({} matrices, {} chunks of {} tokens) in {:.1f} s\n", o->out, m.entries.size(), m.chunk_count,
               m.chunk_size, s);
    return 0;
  })};
});

}  // namespace
