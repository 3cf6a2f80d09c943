// What run, chat, logits and serve share about the model they load: --manifest and --weights
// (a manifest-driven run), the session settings (--kv-dtype --kv-layout --page-size
// --kv-cold --hot-window --prefill-chunk; they win over the manifest's), and the load itself.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/litert_flags.h"
#include "runtime/engine.h"
#include "runtime/run_config.h"

namespace lumen::cli {

struct ModelFlags {
  std::string manifest;  // doppler.execution/v1 manifest: spec, session settings, tokenizer rules
  std::string weights;   // the tensors for --manifest: safetensors dir, .gguf, packed .lmp
  bool allow_unverified = false;
  bool verbose_fields = false;  // list the manifest's field table on stderr
  // A .litertlm package's HF config (or manifest), constant map file and parity receipt.
  std::string litert_config, litert_map, litert_receipt;
  // --quant TYPE, --imatrix F: quantize the weights at load (runtime::LoadOptions).
  std::string quant, imatrix;
  runtime::RunFlags run;
};

// --quant TYPE and --imatrix F (load-time quantization, model/quantize_weights.h), for the
// commands that load a model.
void add_quant_flags(CLI::App* cmd, std::string& quant, std::string& imatrix);

// `CMD --exact`: the same switch as the global `lumen --exact CMD` (kernels::set_exact_matmul),
// for the commands that run a model, so that it may follow the command name.
void add_exact_flag(CLI::App* cmd);
// The per-layer input table flags (--ple-*), also used by commands without the rest.
void add_per_layer_input_flags(CLI::App* cmd, runtime::RunFlags& run);

// Adds the flags (--quant and --imatrix among them). `with_allow_unverified`: also --allow-unverified (commands that already
// have it pass false and copy their value into ModelFlags::allow_unverified).
void add_model_flags(CLI::App* cmd, ModelFlags& flags, bool with_allow_unverified);

// Loads the engine the flags describe, with its RunConfig set: with --manifest, the
// manifest's spec and settings (after the gate and the field check; a one-line summary of
// the field table goes to stderr, the whole table with `verbose_fields`), the weights from
// --weights (or -m); without, the model of -m (resolve_model_path) and default settings.
// Flags override either; --quant / --imatrix, when given, replace options.quant / imatrix. `needs_tokenizer`: the command
// generates text, so the tokenizer is loaded and checked against the manifest's tokenizer
// block here, before the summary line (a mismatch is the only line printed).
std::unique_ptr<runtime::Engine> load_engine(const std::string& model_flag, const ModelFlags& flags,
                                             runtime::LoadOptions options = {}, bool needs_tokenizer = false);

// The model path a command reports (the weights of a manifest run, else -m resolved).
std::string model_path_of(const std::string& model_flag, const ModelFlags& flags);

}  // namespace lumen::cli
