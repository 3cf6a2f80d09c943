// lumen quantize IN OUT --type TYPE [--imatrix F] [--tensor-type NAME=TYPE ...]: a model to a
// standard GGUF in one of llama.cpp's file types (runtime/quantize_model.h).
#include <chrono>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "base/error.h"
#include "cli/command.h"
#include "cli/progress.h"
#include "formats/gguf.h"
#include "runtime/quantize_model.h"

namespace {

using namespace lumen;

struct QuantizeCliOptions {
  std::vector<std::string> paths;
  std::string type = "Q4_K_M", imatrix;
  std::vector<std::string> tensor_types;
  bool allow_requantize = false, json = false;
};

LUMEN_COMMAND(72, [](CLI::App& app) {
  auto o = std::make_shared<QuantizeCliOptions>();
  auto* cmd = app.add_subcommand("quantize", "Quantize a model to a GGUF file in one of llama.cpp's types (Q4_K_M, ...)");
  cmd->add_option("paths", o->paths, "IN OUT: a .gguf (f32/f16/bf16; quantized with --allow-requantize), a Gemma 4 checkpoint directory or a .lmp; the .gguf to write")
      ->required()
      ->expected(2);
  cmd->add_option("--type", o->type, "File type: " + quant::file_type_names() + " (default Q4_K_M)");
  cmd->add_option("--imatrix", o->imatrix, "Importance matrix (llama.cpp's imatrix GGUF or legacy .dat; `lumen imatrix`)");
  cmd->add_option("--tensor-type", o->tensor_types, "NAME=TYPE: tensors whose name matches the regex NAME get TYPE (repeatable)");
  cmd->add_flag("--allow-requantize", o->allow_requantize, "Allow requantizing tensors that are already quantized");
  cmd->add_flag("--json", o->json, "Print the result as JSON");
  return std::pair{cmd, lumen::cli::Runner([o] {
    const auto start = std::chrono::steady_clock::now();
    runtime::QuantizeOptions q;
    q.type = quant::file_type_from_name(o->type, "--type");
    q.imatrix = o->imatrix;
    for (const auto& item : o->tensor_types) q.overrides.push_back(quant::parse_tensor_type_override(item));
    q.allow_requantize = o->allow_requantize;
    const auto source = runtime::open_model_source(o->paths[0]);
    cli::ProgressBar bar("quantize");
    q.progress = [&](uint64_t done, uint64_t total) {
      bar.update(done, total, fmt::format("{:.2f} / {:.2f} GB", done / 1e9, total / 1e9));
    };
    const auto r = runtime::quantize_model(*source, o->paths[1], q);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::map<std::string, int> counts;
    for (const auto& t : r.tensors) ++counts[formats::ggml_type_name(formats::GgmlType(t.to))];
    const double bpw = 8.0 * double(r.bytes_out) / double(r.elements);
    if (o->json) {
      std::string types;
      for (const auto& t : r.tensors)
        types += fmt::format("{}\"{}\": \"{}\"", types.empty() ? "" : ", ", t.name, formats::ggml_type_name(formats::GgmlType(t.to)));
      fmt::print("{{\"out\": \"{}\", \"type\": \"{}\", \"bytes\": {}, \"bpw\": {:.4f}, \"seconds\": {:.2f}, "
                 "\"imatrix_entries\": {}, \"tensors\": {{{}}}}}\n",
                 printable(o->paths[1]), quant::file_type_name(q.type), r.bytes_out, bpw, s, r.imatrix_entries, types);
    } else {
      std::string mix;
      for (const auto& [name, n] : counts) mix += fmt::format("{}{} x{}", mix.empty() ? "" : ", ", name, n);
      fmt::print("wrote {} ({}, {:.1f} MiB, {:.2f} bits per weight; {}{}) in {:.1f} s\n", o->paths[1],
                 quant::file_type_name(q.type), double(r.bytes_out) / 1048576.0, bpw, mix,
                 r.imatrix_entries ? fmt::format("; imatrix for {} tensors", r.imatrix_entries) : "", s);
    }
    return 0;
  })};
});

}  // namespace
