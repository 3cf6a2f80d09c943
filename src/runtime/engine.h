// The engine: a loaded model (spec + mapped weights + graph) and the generation loops
// that drive it. A model is a directory (config.json and safetensors shards) or a GGUF file.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/packed.h"
#include "formats/safetensors.h"
#include "model/gemma_model.h"
#include "runtime/run_config.h"
#include "spec/model_spec.h"
#include "tokenizer/tokenizer.h"

namespace lumen::runtime {

struct LoadOptions {
  // "" keeps the stored formats. A llama.cpp file type (Q4_K_M, Q8_0, ...; q4 = Q4_K_M,
  // q8 = Q8_0) quantizes the matrices at load with `lumen quantize`'s quantizers and mix
  // (model/quantize_weights.h: the same bits as the GGUF it writes); f32, bf16, f16 convert
  // every matrix to that float format.
  std::string quant;
  // With a quantized `quant`: the importance matrix to weight the quantizers with ("" none).
  std::string imatrix;
  // Load a manifest whose `unsupported` block marks it known-bad (refused otherwise).
  bool allow_unverified = false;
  // A spec from a manifest (`--manifest`), run instead of the weights' own description after
  // every shape is checked against it (runtime/manifest_run.h: spec_to_run).
  std::optional<spec::ModelSpec> manifest_spec = std::nullopt;
  // A .litertlm package (runtime/litert_load.h): its config (HF config.json or manifest), its
  // constant map file, its parity receipt. Ignored for other models.
  std::string litert_config, litert_map, litert_receipt;
  // The manifest file it came from ("" when none): a loader that reads more of it (a
  // .litertlm package's mapping block) takes it from here.
  std::string manifest_path = {};
};

class Engine {
 public:
  // `model_path`: a model directory (config.json + safetensors), a .gguf file or a packed
  // .lmp file. Throws lumen::Error (one line naming the file, tensor or field) on any defect,
  // and on a manifest whose `unsupported` block marks it known-bad unless allow_unverified.
  static std::unique_ptr<Engine> load(const std::string& model_path, const LoadOptions& options = {});

  // The GGUF file the model was loaded from (its tokenizer metadata); nullptr otherwise.
  const formats::GgufFile* gguf() const { return gguf_.get(); }

  const spec::ModelSpec& spec() const { return model_->spec(); }
  const model::GemmaModel& model() const { return *model_; }
  // The model's tokenizer (tokenizer.json or tokenizer.model next to the weights, a GGUF
  // file's own vocabulary), loaded on
  // first use so that commands which need none never read it; nullptr when the model has
  // none. Throws lumen::Error when the file is defective.
  const tokenizer::Tokenizer* tokenizer() const;
  // The tokenizer, or a lumen::Error naming the model when it has none.
  const tokenizer::Tokenizer& require_tokenizer() const;
  // Replaces the tokenizer (e.g. one given on the command line).
  void set_tokenizer(std::unique_ptr<tokenizer::Tokenizer> tokenizer);
  // Where the model was loaded from.
  const std::string& path() const { return path_; }
  // "" while every mapped weight file is still the one loaded; else one line naming the file
  // and what happened to it ("truncated from N to M bytes", "modified", ...). The weights
  // point into those mappings: reading a page a truncation removed is a SIGBUS, so a server
  // asks this before each step and stops using the model instead.
  std::string weights_changed_on_disk() const;

  // Session settings (KV cache, prefill chunk, ...) of the runs this engine drives: its own
  // loops below, and the Sessions made from it. Default: RunConfig{}.
  const RunConfig& run_config() const { return run_config_; }
  // Also applies the per-layer input settings to the model (models that have them).
  void set_run_config(RunConfig config);

  // Logits [tokens.size(), vocab] for every position of one sequence, prefilled in chunks
  // of `chunk` rows (each chunk is one batched forward step; 0: run_config().prefill_chunk).
  std::vector<float> logits_all(std::span<const int32_t> tokens, int chunk = 0) const;

  // Greedy continuation of `prompt`: exactly n tokens (no stop tokens), each reported to
  // on_token as soon as it is chosen.
  std::vector<int32_t> generate_greedy(std::span<const int32_t> prompt, int n,
                                       const std::function<void(int32_t)>& on_token = {}) const;

 private:
  Engine() = default;
  formats::SafetensorsCheckpoint checkpoint_;
  std::unique_ptr<formats::GgufFile> gguf_;  // owns the mapping the weights point into
  std::unique_ptr<formats::PackedFile> packed_;
  std::unique_ptr<model::GemmaModel> model_;
  mutable std::mutex tokenizer_mutex_;
  mutable bool tokenizer_looked_up_ = false;
  mutable std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::string path_;
  RunConfig run_config_;
};

// Index of the largest value; the lowest index wins ties (as torch.argmax does).
int32_t argmax(const float* x, int64_t n);

}  // namespace lumen::runtime
