// A Hugging Face checkpoint directory or a packed .lmp as a `lumen quantize` source: its
// tensors under llama.cpp's names and the metadata llama.cpp's converter would write for it
// (spec/gguf_export.h, tokenizer/gguf_vocab_export.h), so quantizing it gives the GGUF that
// convert_hf_to_gguf.py followed by llama-quantize gives.
#include <filesystem>
#include <fstream>
#include <memory>

#include "base/error.h"
#include "base/json.h"
#include "formats/packed.h"
#include "formats/safetensors.h"
#include "model/weights.h"
#include "quant/repack.h"
#include "runtime/quantize_model.h"
#include "spec/gguf_export.h"
#include "tokenizer/gguf_vocab_export.h"

namespace lumen::runtime {

namespace {

namespace fs = std::filesystem;
constexpr int kGgmlF32 = 0, kGgmlQ4_0 = 2, kGgmlQ8_0 = 8;

class CheckpointSource : public ModelSource {
 public:
  CheckpointSource(std::string path, spec::ModelSpec spec, const nlohmann::json& config, std::string vocab_dir,
                   const model::TensorLookup& lookup, const std::vector<std::string>& names)
      : path_(std::move(path)) {
    // The model must be whole before anything is written: every tensor the spec needs present
    // with its shape (the same checks as loading it to run).
    const model::ModelWeights bound = model::bind_weights(spec, lookup, names, path_);
    const std::string prefix = bound.name_prefix;
    md_.set_string("general.type", "model");
    fs::path named(path_);
    if (named.filename().empty()) named = named.parent_path();  // "dir/"
    md_.set_string("general.name", named.filename().string());
    spec::add_gemma4_gguf_metadata(spec, config, path_, md_);
    std::error_code ec;
    if (!fs::is_regular_file(fs::path(vocab_dir) / "tokenizer.json", ec))
      throw Error(path_ + ": no tokenizer.json in " + (vocab_dir.empty() ? std::string(".") : vocab_dir) +
                  "; a GGUF carries the model's vocabulary");
    const int64_t vocab_rows = tokenizer::add_gemma4_vocab_to_gguf(vocab_dir, md_);

    rope_freqs_ = spec::gemma4_rope_freqs(spec);
    tensors_.push_back({"rope_freqs.weight", kGgmlF32, {int64_t(rope_freqs_.size())}});
    entries_.push_back({{quant::WeightFormat::F32, 1, int64_t(rope_freqs_.size()), rope_freqs_.data()}, true});
    for (const std::string& full : names) {
      std::string name;
      if (full == "lm_head.weight") name = full;
      else if (full.starts_with(prefix)) name = full.substr(prefix.size());
      else continue;  // another tower (vision, audio): not part of the text model's GGUF
      const std::optional<std::string> gguf = spec::gemma4_gguf_tensor_name(name);
      if (!gguf) throw Error(path_ + ": tensor '" + printable(full) + "' has no name in llama.cpp's gemma4 layout");
      const formats::TensorView* v = lookup(full);
      if (!v || v->shape.empty() || v->shape.size() > 2)
        throw Error(path_ + ": tensor '" + printable(full) + "' is not a vector or a matrix");
      quant::WeightMatrix m;
      if (!v->storage_format.empty()) {
        const int f = quant::weight_format_from_name(v->storage_format.c_str());
        if (f < 0) throw Error(path_ + ": tensor '" + printable(full) + "' has storage format '" + v->storage_format + "', which Lumen cannot read");
        m.format = quant::WeightFormat(f);
      } else if (v->dtype == DType::F32 || v->dtype == DType::F16 || v->dtype == DType::BF16) {
        m.format = v->dtype == DType::F32 ? quant::WeightFormat::F32
                   : v->dtype == DType::F16 ? quant::WeightFormat::F16 : quant::WeightFormat::BF16;
      } else {
        throw Error(path_ + ": tensor '" + printable(full) + "' has dtype " + std::string(dtype_name(v->dtype)) +
                    "; expected F32, F16 or BF16");
      }
      m.rows = v->shape.size() == 2 ? v->shape[0] : 1;
      m.cols = v->shape.back();
      m.data = v->data;
      if (*gguf == "token_embd.weight") m.rows = std::min(m.rows, vocab_rows);  // the converter drops rows past the vocabulary
      int type = quant::ggml_type_of(m.format);
      if (m.format == quant::WeightFormat::Q4_0X4) type = kGgmlQ4_0;
      if (m.format == quant::WeightFormat::Q8_0X4) type = kGgmlQ8_0;
      // Vectors and norm gains are F32 in the converter's files whatever the checkpoint's dtype.
      const bool vector = v->shape.size() == 1 || gguf->ends_with("_norm.weight");
      if (vector) type = kGgmlF32;
      const bool as_stored = !quant::is_interleaved(m.format) && type == quant::ggml_type_of(m.format);
      std::vector<int64_t> ne = v->shape.size() == 2 ? std::vector<int64_t>{m.cols, m.rows} : std::vector<int64_t>{m.cols};
      tensors_.push_back({*gguf, type, std::move(ne)});
      entries_.push_back({m, as_stored});
    }
  }

  const std::string& path() const override { return path_; }
  const formats::GgufMetadata& metadata() const override { return md_; }
  const std::vector<Tensor>& tensors() const override { return tensors_; }
  void read_rows(size_t i, int64_t r0, int64_t r1, float* out) const override {
    const quant::WeightMatrix& m = entries_[i].matrix;
    const int64_t cols = m.cols;
    std::vector<float> row(size_t(quant::padded_cols(cols)));
    for (int64_t r = r0; r < r1; ++r) {
      quant::dequantize_row(m, r, row.data());
      std::copy(row.begin(), row.begin() + cols, out + (r - r0) * cols);
    }
  }
  const std::byte* raw(size_t i) const override {
    return entries_[i].as_stored ? static_cast<const std::byte*>(entries_[i].matrix.data) : nullptr;
  }

 private:
  struct Entry {
    quant::WeightMatrix matrix;
    bool as_stored;  // the GGUF's bytes are the stored bytes
  };
  std::string path_;
  formats::GgufMetadata md_;
  std::vector<Tensor> tensors_;
  std::vector<Entry> entries_;
  std::vector<float> rope_freqs_;
};

// Keeps the mapped checkpoint alive as long as the source.
template <typename Holder>
class Owning : public CheckpointSource {
 public:
  template <typename... A>
  Owning(std::unique_ptr<Holder> holder, A&&... a) : CheckpointSource(std::forward<A>(a)...), holder_(std::move(holder)) {}

 private:
  std::unique_ptr<Holder> holder_;
};

}  // namespace

std::unique_ptr<ModelSource> open_checkpoint_source(const std::string& path) {
  if (formats::is_packed_file(path)) {
    auto packed = formats::PackedFile::open(path);
    const auto* p = packed.get();
    spec::ModelSpec spec = spec::spec_from_hf_config(p->config(), path);
    const std::string dir = fs::path(path).parent_path().string();
    return std::make_unique<Owning<formats::PackedFile>>(
        std::move(packed), path, std::move(spec), p->config(), dir.empty() ? "." : dir,
        [p](const std::string& n) { return p->find(n); }, p->names());
  }
  spec::ModelSpec spec = spec::load_spec(path);
  auto ckpt = std::make_unique<formats::SafetensorsCheckpoint>(formats::SafetensorsCheckpoint::open(path));
  const auto* c = ckpt.get();
  const nlohmann::json config = [&] {
    std::ifstream in(fs::path(path) / "config.json", std::ios::binary);
    return parse_json(in);
  }();
  return std::make_unique<Owning<formats::SafetensorsCheckpoint>>(
      std::move(ckpt), path, std::move(spec), config, path, [c](const std::string& n) { return c->find(n); }, c->names());
}

}  // namespace lumen::runtime
