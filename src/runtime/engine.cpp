#include "runtime/engine.h"

#include <algorithm>
#include <filesystem>

#include "base/error.h"
#include "kernels/ops.h"
#include "kv/make_cache.h"
#include "model/quantize_weights.h"
#include "runtime/manifest_run.h"
#include "runtime/litert_load.h"

namespace lumen::runtime {

namespace fs = std::filesystem;

std::unique_ptr<Engine> Engine::load(const std::string& model_path, const LoadOptions& options) {
  // --quant: a float format converts while binding; a quantized file type quantizes the bound
  // weights (model/quantize_weights.h), whatever they were stored as.
  std::optional<quant::WeightFormat> requantize;
  std::optional<model::QuantTarget> quantize;
  if (!options.quant.empty()) {
    const model::QuantTarget target = model::parse_quant_target(options.quant, "--quant");
    if (target.mix) quantize = target;
    else requantize = target.format;
  }
  if (!options.imatrix.empty() && !quantize)
    throw Error("--imatrix " + options.imatrix + ": an importance matrix weights a quantizer; give --quant and a quantized type (" +
                (options.quant.empty() ? "none given" : options.quant + " is a float format") + ")");
  auto quantize_bound = [&](const spec::ModelSpec& spec, model::ModelWeights& weights) {
    if (quantize) model::quantize_weights(weights, spec, *quantize, options.imatrix, model_path);
  };
  if (formats::is_packed_file(model_path)) {
    std::unique_ptr<Engine> engine(new Engine());
    engine->path_ = model_path;
    engine->packed_ = formats::PackedFile::open(model_path);
    const auto& packed = *engine->packed_;
    spec::ModelSpec spec = spec_to_run(spec::spec_from_hf_config(packed.config(), model_path), options);
    model::ModelWeights weights = model::bind_weights(
        spec, [&](const std::string& name) { return packed.find(name); }, packed.names(), model_path, requantize);
    quantize_bound(spec, weights);
    engine->model_ = std::make_unique<model::GemmaModel>(std::move(spec), std::move(weights));
    return engine;
  }
  std::unique_ptr<Engine> engine(new Engine());
  engine->path_ = model_path;
  if (is_litertlm_file(model_path)) {
    LitertModel m = load_litert_package(model_path, {options.manifest_spec, options.litert_config, options.litert_map, options.litert_receipt,
                                                     options.allow_unverified, requantize});
    if (m.tokenizer) engine->set_tokenizer(std::move(m.tokenizer));
    quantize_bound(m.spec, m.weights);
    engine->model_ = std::make_unique<model::GemmaModel>(std::move(m.spec), std::move(m.weights));
    return engine;
  }
  if (spec::is_gguf_file(model_path)) {
    engine->gguf_ = std::make_unique<formats::GgufFile>(formats::GgufFile::open(model_path));
    spec::ModelSpec spec = spec_to_run(spec::spec_from_gguf(*engine->gguf_), options);
    model::ModelWeights weights = model::bind_gguf_weights(spec, *engine->gguf_);
    // --quant f32/bf16/f16: the ggml blocks expanded exactly, then stored in that format.
    if (requantize) model::requantize_weights(weights, *requantize);
    quantize_bound(spec, weights);
    engine->model_ = std::make_unique<model::GemmaModel>(std::move(spec), std::move(weights));
    engine->path_ = model_path;
    return engine;
  }
  std::error_code ec;
  if (!fs::is_directory(model_path, ec)) {
    if (fs::is_regular_file(model_path, ec))
      throw Error(model_path + ": not a GGUF file (no 'GGUF' magic) and not a model directory");
    throw Error(model_path + ": not a model directory (expected config.json and *.safetensors) or .gguf file");
  }
  // With a manifest, a directory of bare safetensors (no config.json) is enough.
  spec::ModelSpec spec = spec_to_run(
      options.manifest_spec && !fs::exists(fs::path(model_path) / "config.json") ? std::nullopt
                                                                                 : std::optional(spec::load_spec(model_path)),
      options);
  spec::require_supported(spec, options.allow_unverified);  // before any weight is touched
  engine->checkpoint_ = formats::SafetensorsCheckpoint::open(model_path);
  const auto& ckpt = engine->checkpoint_;
  model::ModelWeights weights = model::bind_weights(
      spec, [&](const std::string& name) { return ckpt.find(name); }, ckpt.names(), model_path, requantize);
  quantize_bound(spec, weights);
  engine->model_ = std::make_unique<model::GemmaModel>(std::move(spec), std::move(weights));
  return engine;
}

std::string Engine::weights_changed_on_disk() const {
  auto check = [](const formats::MappedFile& file) -> std::string {
    const std::string change = file.change_on_disk();
    return change.empty() ? change : "model file '" + printable(file.path()) + "' " + change + " since it was loaded";
  };
  if (gguf_) return check(gguf_->mapped_file());
  if (packed_) return check(packed_->mapped_file());
  for (const auto& file : checkpoint_.mapped_files())
    if (std::string change = check(*file); !change.empty()) return change;
  return {};
}

const tokenizer::Tokenizer* Engine::tokenizer() const {
  std::lock_guard lock(tokenizer_mutex_);
  if (!tokenizer_looked_up_ && gguf_) {
    // A GGUF file carries its tokenizer in its metadata (tokenizer.ggml.*).
    if (gguf_->has("tokenizer.ggml.tokens")) tokenizer_ = tokenizer::load_gguf_tokenizer(gguf_->tokenizer(), path_);
    tokenizer_looked_up_ = true;
  }
  if (!tokenizer_looked_up_) {
    std::error_code ec;
    if (gguf_)
      tokenizer_ = tokenizer::load_gguf_tokenizer(gguf_->tokenizer(), path_);  // tokenizer.ggml.* metadata
    else if (fs::is_directory(path_, ec)) {
      tokenizer_ = tokenizer::find_tokenizer(path_);
      // A checkpoint may carry its vocabulary as a vocab-only GGUF (tokenizer.gguf).
      if (!tokenizer_ && fs::is_regular_file(fs::path(path_) / "tokenizer.gguf", ec))
        tokenizer_ = tokenizer::load_tokenizer((fs::path(path_) / "tokenizer.gguf").string());
    }
    else
      tokenizer_ = tokenizer::find_tokenizer(fs::path(path_).parent_path().string());
    tokenizer_looked_up_ = true;
  }
  return tokenizer_.get();
}

void Engine::set_tokenizer(std::unique_ptr<tokenizer::Tokenizer> tokenizer) {
  std::lock_guard lock(tokenizer_mutex_);
  tokenizer_ = std::move(tokenizer);
  tokenizer_looked_up_ = true;
}

const tokenizer::Tokenizer& Engine::require_tokenizer() const {
  if (!tokenizer())
    throw Error(path_ + (gguf_ ? ": the GGUF file has no tokenizer (no tokenizer.ggml.* metadata)"
                               : ": the model has no tokenizer (expected tokenizer.json or tokenizer.model next to config.json)"));
  return *tokenizer_;
}

std::vector<float> Engine::logits_all(std::span<const int32_t> tokens, int chunk) const {
  const int64_t V = spec().vocab_size;
  if (chunk <= 0) chunk = run_config_.prefill_chunk;
  auto cache = kv::make_cache(spec(), run_config_.kv, int64_t(tokens.size()));
  model::SequenceKv* caches[] = {cache.get()};
  std::vector<float> all(tokens.size() * size_t(V)), step;
  std::vector<model::BatchRow> rows;
  for (size_t start = 0; start < tokens.size(); start += size_t(chunk)) {
    const size_t end = std::min(tokens.size(), start + size_t(chunk));
    rows.clear();
    for (size_t i = start; i < end; ++i) rows.push_back({0, int32_t(i), tokens[i], true});
    model_->hint_next_tokens(tokens.subspan(end));
    model_->forward(rows, caches, step);
    std::copy(step.begin(), step.end(), all.begin() + int64_t(start) * V);
  }
  return all;
}

std::vector<int32_t> Engine::generate_greedy(std::span<const int32_t> prompt, int n,
                                             const std::function<void(int32_t)>& on_token) const {
  if (prompt.empty()) throw Error("generation needs at least one prompt token");
  const int64_t V = spec().vocab_size;
  auto cache = kv::make_cache(spec(), run_config_.kv, int64_t(prompt.size()) + n);
  model::SequenceKv* caches[] = {cache.get()};
  std::vector<model::BatchRow> rows;
  std::vector<float> logits;
  const size_t chunk = size_t(std::max(1, run_config_.prefill_chunk));
  for (size_t start = 0; start < prompt.size(); start += chunk) {
    rows.clear();
    const size_t end = std::min(prompt.size(), start + chunk);
    for (size_t i = start; i < end; ++i) rows.push_back({0, int32_t(i), prompt[i], i + 1 == prompt.size()});
    model_->hint_next_tokens(prompt.subspan(end));
    model_->forward(rows, caches, logits);
  }
  std::vector<int32_t> out;
  int32_t pos = int32_t(prompt.size());
  for (int i = 0; i < n; ++i) {
    const int32_t next = argmax(logits.data(), V);
    out.push_back(next);
    if (on_token) on_token(next);
    if (i + 1 == n) break;
    const model::BatchRow row{0, pos++, next, true};
    model_->forward(std::span(&row, 1), caches, logits);
  }
  return out;
}

void Engine::set_run_config(RunConfig config) {
  if (auto* pli = model_->per_layer_inputs()) pli->configure(config.per_layer_inputs);
  run_config_ = std::move(config);
}

int32_t argmax(const float* x, int64_t n) { return int32_t(kernels::argmax(x, n)); }

}  // namespace lumen::runtime
