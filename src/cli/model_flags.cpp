#include "cli/model_flags.h"

#include <fmt/format.h>

#include "base/error.h"
#include "cli/command.h"
#include "kernels/matmul.h"
#include "model/quantize_weights.h"
#include "runtime/litert_load.h"
#include "runtime/manifest_run.h"

namespace lumen::cli {

void add_exact_flag(CLI::App* cmd) {
  cmd->add_flag_callback("--exact", [] { kernels::set_exact_matmul(true); },
                         "Run every matrix product on the f32 reference path (weights expanded exactly, f32 "
                         "activations) instead of the int8 kernels (as `lumen --exact`)");
}

void add_model_flags(CLI::App* cmd, ModelFlags& f, bool with_allow_unverified) {
  cmd->add_option("--manifest", f.manifest,
                  "doppler.execution/v1 manifest: model spec, session settings and tokenizer rules (with --weights)");
  cmd->add_option("--weights", f.weights,
                  "The weights a --manifest runs: safetensors directory, .gguf, packed .lmp or .litertlm package");
  add_litert_flags(cmd, f.litert_config, f.litert_map, f.litert_receipt);
  if (with_allow_unverified)
    cmd->add_flag("--allow-unverified", f.allow_unverified,
                  "Run a model whose manifest marks it unsupported (known not to run correctly)");
  add_exact_flag(cmd);
  add_quant_flags(cmd, f.quant, f.imatrix);
  cmd->add_flag("--fields", f.verbose_fields, "With --manifest: list every manifest field and what Lumen does with it (stderr)");
  cmd->add_option("--kv-dtype", f.run.kv_dtype, "KV cache element type: f32, f16, bf16 (default: the manifest's, else f32)");
  cmd->add_option("--kv-layout", f.run.kv_layout, "KV cache layout: contiguous, paged, tiered (default: the manifest's, else paged)");
  cmd->add_option("--page-size", f.run.page_size, "Positions per KV page (default: the manifest's, else 256)");
  cmd->add_option("--kv-cold", f.run.kv_cold, "Cold tier of full-attention layers: off, f32, f16, bf16, int8, int4");
  cmd->add_option("--hot-window", f.run.hot_window, "Positions of full-attention layers kept hot when tiered (default 1024)");
  cmd->add_option("--prefill-chunk", f.run.prefill_chunk, "Prompt rows per forward step (default 256; serve: 64, so running streams keep flowing)");
  add_per_layer_input_flags(cmd, f.run);
}

void add_quant_flags(CLI::App* cmd, std::string& quant, std::string& imatrix) {
  cmd->add_option("--quant", quant,
                  "Quantize the weights at load as `lumen quantize --type` does (the same mix, the same bits): " +
                      model::quant_target_names() + " (F32, BF16, F16: every matrix in that float format)");
  cmd->add_option("--imatrix", imatrix,
                  "With --quant TYPE: weight the quantizers by this importance matrix (`lumen imatrix`, or llama.cpp's)");
}

void add_per_layer_input_flags(CLI::App* cmd, runtime::RunFlags& run) {
  cmd->add_option("--ple-table", run.ple_table,
                  "Per-layer input table (E2B/E4B): mapped (read in place, default) or resident (copied into memory)");
  cmd->add_option("--ple-row-cache", run.ple_row_cache, "Per-layer input row cache: off, or the rows it keeps (default 512)");
  cmd->add_option("--ple-row-cache-bytes", run.ple_row_cache_bytes, "Byte limit of the row cache (e.g. 64MiB; default 64MiB)");
  cmd->add_option("--ple-row-dtype", run.ple_row_dtype, "Element type of cached rows: f32 (default), or the table's own bf16/f16");
  cmd->add_option("--ple-prefetch", run.ple_prefetch, "Prefetch of upcoming tokens' rows: off, or rows ahead (default 1)");
  cmd->add_option("--ple-hot-cache", run.ple_hot_cache, "Prepared per-layer inputs kept: off, or tokens (default 1024)");
  cmd->add_option("--ple-hot-bytes", run.ple_hot_bytes, "Byte limit of the prepared-input cache (default 64MiB)");
}

std::string model_path_of(const std::string& model_flag, const ModelFlags& f) {
  if (!f.manifest.empty() || !f.weights.empty()) {
    if (!f.weights.empty() && !model_flag.empty() && f.weights != model_flag)
      throw Error("--weights and -m name different models: give one");
    const std::string& w = f.weights.empty() ? model_flag : f.weights;
    if (w.empty()) throw Error("--manifest: give the weights it runs (--weights PATH)");
    return w;
  }
  return resolve_model_path(model_flag);
}

std::unique_ptr<runtime::Engine> load_engine(const std::string& model_flag, const ModelFlags& f,
                                             runtime::LoadOptions options, bool needs_tokenizer) {
  const std::string weights = model_path_of(model_flag, f);
  options.allow_unverified = options.allow_unverified || f.allow_unverified;
  options.litert_config = f.litert_config;
  options.litert_map = f.litert_map;
  options.litert_receipt = f.litert_receipt;
  if (!f.quant.empty()) options.quant = f.quant;
  if (!f.imatrix.empty()) options.imatrix = f.imatrix;
  runtime::RunConfig run;
  std::string summary;
  if (!f.manifest.empty()) {
    runtime::ManifestRun m = runtime::load_manifest_run(
        f.manifest, options.allow_unverified, runtime::is_litertlm_file(weights) ? weights : "", f.litert_receipt);
    if (f.verbose_fields) fmt::print(stderr, "{}", runtime::field_table_to_text(m.table));
    summary = "manifest " + f.manifest + ": " + runtime::field_counts_text(m.table.counts());
    run = std::move(m.run);
    options.manifest_spec = std::move(m.spec);
    options.manifest_path = f.manifest;
  }
  // Flags before the weights are read: a typo costs no load.
  runtime::apply_run_flags(run, f.run);
  if (options.manifest_spec) runtime::validate_run_config(run, *options.manifest_spec);
  auto engine = runtime::Engine::load(weights, options);
  runtime::validate_run_config(run, engine->spec());
  if (needs_tokenizer) runtime::check_tokenizer(run, engine->require_tokenizer());
  if (!f.manifest.empty()) {
    fmt::print(stderr, "lumen: {}; session: {}\n", summary, runtime::run_config_to_text(run));
    if (f.verbose_fields)
      for (const auto& note : engine->spec().notes) fmt::print(stderr, "lumen: note: {}\n", note);
  }
  engine->set_run_config(std::move(run));
  return engine;
}

}  // namespace lumen::cli
