// The engine: a loaded model (spec + mapped weights + graph) and the generation loops
// that drive it. A model is a directory (config.json and safetensors shards) or a GGUF file.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "model/gemma_model.h"
#include "spec/model_spec.h"

namespace lumen::runtime {

class Engine {
 public:
  // `model_path`: a model directory (config.json + safetensors) or a .gguf file. Throws
  // lumen::Error (one line naming the file, tensor or field) on any defect.
  static std::unique_ptr<Engine> load(const std::string& model_path);

  // The GGUF file the model was loaded from (its tokenizer metadata); nullptr otherwise.
  const formats::GgufFile* gguf() const { return gguf_.get(); }

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
  std::unique_ptr<formats::GgufFile> gguf_;  // owns the mapping the weights point into
  std::unique_ptr<model::GemmaModel> model_;
};

// Index of the largest value; the lowest index wins ties (as torch.argmax does).
int32_t argmax(const float* x, int64_t n);

}  // namespace lumen::runtime
