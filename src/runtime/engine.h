// The engine: a loaded model (spec + mapped weights + graph) and the generation loops
// that drive it. A model directory holds config.json and safetensors shards.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "formats/packed.h"
#include "formats/safetensors.h"
#include "model/gemma_model.h"
#include "spec/model_spec.h"

namespace lumen::runtime {

struct LoadOptions {
  // "" keeps the stored formats; "q4", "q8", "bf16", "f32" converts the matrices at load
  // (quant/convert.h). A packed file (`lumen convert`) is already converted.
  std::string quant;
};

class Engine {
 public:
  // `model_path`: a model directory (config.json + safetensors) or a packed .lmp file.
  // Throws lumen::Error (one line naming the file, tensor or field) on any defect.
  static std::unique_ptr<Engine> load(const std::string& model_path, const LoadOptions& options = {});

  const spec::ModelSpec& spec() const { return model_->spec(); }
  const model::GemmaModel& model() const { return *model_; }

  // Logits [tokens.size(), vocab] for every position of one sequence, prefilled in chunks
  // of `chunk` rows (each chunk is one batched forward step).
  std::vector<float> logits_all(std::span<const int32_t> tokens, int chunk = 256) const;

  // Greedy continuation of `prompt`: exactly n tokens (no stop tokens), each reported to
  // on_token as soon as it is chosen.
  std::vector<int32_t> generate_greedy(std::span<const int32_t> prompt, int n,
                                       const std::function<void(int32_t)>& on_token = {}) const;

 private:
  Engine() = default;
  formats::SafetensorsCheckpoint checkpoint_;
  std::unique_ptr<formats::PackedFile> packed_;
  std::unique_ptr<model::GemmaModel> model_;
};

// Index of the largest value; the lowest index wins ties (as torch.argmax does).
int32_t argmax(const float* x, int64_t n);

}  // namespace lumen::runtime
