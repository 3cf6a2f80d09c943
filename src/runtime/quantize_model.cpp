#include "runtime/quantize_model.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/packed.h"
#include "model/quantize_weights.h"
#include "model/weights.h"
#include "quant/ggml_blocks.h"
#include "quant/imatrix.h"
#include "quant/quantize.h"

namespace lumen::runtime {

namespace {

using formats::GgmlType;

bool is_float_type(int t) { return t == int(GgmlType::F32) || t == int(GgmlType::F16) || t == int(GgmlType::BF16); }

std::string type_name(int t) { return formats::ggml_type_name(GgmlType(t)); }

class GgufSource : public ModelSource {
 public:
  explicit GgufSource(formats::GgufFile file) : file_(std::move(file)) {
    for (const auto& [key, value] : file_.metadata()) metadata_.set_value(key, value);
    for (const auto& t : file_.tensors()) tensors_.push_back({t.name, int(t.type), t.ne});
  }
  const std::string& path() const override { return file_.path(); }
  const formats::GgufMetadata& metadata() const override { return metadata_; }
  const std::vector<Tensor>& tensors() const override { return tensors_; }
  void read_rows(size_t i, int64_t r0, int64_t r1, float* out) const override {
    const formats::GgufTensor& t = file_.tensors()[i];
    if (!quant::ggml_can_dequantize(int(t.type)))
      throw Error(file_.path() + ": tensor '" + printable(t.name) + "' has type " + formats::ggml_type_name(t.type) +
                  ", which Lumen cannot read");
    const size_t rb = t.row_bytes();
    const int64_t n = t.row_length();
    for (int64_t r = r0; r < r1; ++r) quant::dequantize_ggml_row(int(t.type), t.data + size_t(r) * rb, n, out + (r - r0) * n);
  }
  const std::byte* raw(size_t i) const override { return file_.tensors()[i].data; }

 private:
  formats::GgufFile file_;
  formats::GgufMetadata metadata_;
  std::vector<Tensor> tensors_;
};

// Reads an integer metadata value back from the encoded form (u32/i32/u64 and the first
// element of an integer array), for block_count and head counts.
std::optional<int64_t> metadata_int(const formats::GgufMetadata& md, const std::string& key) {
  for (const auto& e : md.entries()) {
    if (e.key != key) continue;
    const uint8_t* p = e.value.data();
    uint32_t tag;
    std::memcpy(&tag, p, 4);
    auto scalar = [&](uint32_t t, const uint8_t* v) -> std::optional<int64_t> {
      switch (formats::GgufType(t)) {
        case formats::GgufType::UINT8: return v[0];
        case formats::GgufType::INT8: return int8_t(v[0]);
        case formats::GgufType::UINT16: { uint16_t x; std::memcpy(&x, v, 2); return x; }
        case formats::GgufType::INT16: { int16_t x; std::memcpy(&x, v, 2); return x; }
        case formats::GgufType::UINT32: { uint32_t x; std::memcpy(&x, v, 4); return x; }
        case formats::GgufType::INT32: { int32_t x; std::memcpy(&x, v, 4); return x; }
        case formats::GgufType::UINT64: { uint64_t x; std::memcpy(&x, v, 8); return int64_t(x); }
        case formats::GgufType::INT64: { int64_t x; std::memcpy(&x, v, 8); return x; }
        default: return std::nullopt;
      }
    };
    if (formats::GgufType(tag) == formats::GgufType::ARRAY) {
      uint32_t et;
      uint64_t n;
      std::memcpy(&et, p + 4, 4);
      std::memcpy(&n, p + 8, 8);
      if (n == 0) return std::nullopt;
      return scalar(et, p + 16);
    }
    return scalar(tag, p + 4);
  }
  return std::nullopt;
}

std::string metadata_string(const formats::GgufMetadata& md, const std::string& key) {
  for (const auto& e : md.entries()) {
    if (e.key != key) continue;
    uint32_t tag;
    std::memcpy(&tag, e.value.data(), 4);
    if (formats::GgufType(tag) != formats::GgufType::STRING) return "";
    uint64_t n;
    std::memcpy(&n, e.value.data() + 4, 8);
    return std::string(reinterpret_cast<const char*>(e.value.data() + 12), size_t(n));
  }
  return "";
}

quant::MixOptions mix_options(const ModelSource& src, const QuantizeOptions& o, bool has_imatrix) {
  const auto& md = src.metadata();
  const std::string arch = metadata_string(md, "general.architecture");
  if (arch.empty()) throw Error(src.path() + ": no general.architecture: not a model GGUF");
  quant::MixOptions m;
  m.file_type = o.type;
  m.has_imatrix = has_imatrix;
  m.overrides = o.overrides;
  const auto blocks = metadata_int(md, arch + ".block_count");
  if (!blocks) throw Error(src.path() + ": missing metadata key '" + arch + ".block_count'");
  m.n_layers = int(*blocks);
  const auto heads = metadata_int(md, arch + ".attention.head_count");
  const auto kv = metadata_int(md, arch + ".attention.head_count_kv");
  m.n_gqa = heads && kv && *kv > 0 ? int(*heads / *kv) : 1;
  m.n_expert = int(metadata_int(md, arch + ".expert_count").value_or(0));
  return m;
}

std::vector<quant::MixTensor> mix_tensors(const ModelSource& src) {
  std::vector<quant::MixTensor> t;
  for (const auto& s : src.tensors()) t.push_back({s.name, s.type, s.ne});
  return t;
}

int64_t rows_of(const ModelSource::Tensor& t) {
  int64_t r = 1;
  for (size_t k = 1; k < t.ne.size(); ++k) r *= t.ne[k];
  return r;
}

// Matrices stacked in a tensor (ne[2] and up: experts), 1 for a matrix or a vector.
int64_t matrices_of(const ModelSource::Tensor& t) {
  int64_t n = 1;
  for (size_t k = 2; k < t.ne.size(); ++k) n *= t.ne[k];
  return n;
}

}  // namespace

std::unique_ptr<ModelSource> open_gguf_source(const std::string& path) {
  formats::GgufFile file = formats::GgufFile::open(path);
  // The model must be whole before anything is written: its spec from the metadata, every
  // tensor the spec needs present with its shape, none left over.
  const spec::ModelSpec spec = spec::spec_from_gguf(file);
  model::bind_gguf_weights(spec, file);
  // llama.cpp's mix has rules of its own for models with experts (attn_k/attn_v/attn_output and
  // ffn_down raised by the expert count, ffn_down counted per expert stack) that quant_mix does
  // not implement: refused rather than written with another mix than llama-quantize's.
  for (size_t i = 0; i < spec.layers.size(); ++i)
    if (spec.layers[i].moe())
      throw Error(path + ": block " + std::to_string(i) + " is a mixture-of-experts block (" +
                  std::to_string(spec.layers[i].num_experts) +
                  " experts); Lumen does not quantize GGUFs with experts yet (llama.cpp's mix treats them apart)");
  return std::make_unique<GgufSource>(std::move(file));
}

std::unique_ptr<ModelSource> open_model_source(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec) || formats::is_packed_file(path)) return open_checkpoint_source(path);
  if (!std::filesystem::exists(path, ec)) throw Error(path + ": no such file or directory");
  if (!spec::is_gguf_file(path))
    throw Error(path + ": not a GGUF file, a packed .lmp or a checkpoint directory");
  return open_gguf_source(path);
}

std::vector<int> planned_types(const ModelSource& source, const QuantizeOptions& options, bool has_imatrix) {
  return quant::choose_tensor_types(mix_tensors(source), mix_options(source, options, has_imatrix));
}

QuantizeResult quantize_model(const ModelSource& src, const std::string& out, const QuantizeOptions& o) {
  const auto& tensors = src.tensors();
  // The imatrix: every entry must name a tensor of this model with its row length.
  quant::Imatrix imatrix;
  std::map<std::string, std::vector<float>> importance;
  if (!o.imatrix.empty()) {
    imatrix = quant::read_imatrix(o.imatrix);
    std::map<std::string, quant::ImatrixTensorShape> shapes;
    for (const auto& t : tensors) shapes[t.name] = {t.ne[0], matrices_of(t)};
    importance = quant::imatrix_importance_for(imatrix, o.imatrix, shapes, src.path());
  }

  const std::vector<int> types = planned_types(src, o, !importance.empty());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    if (types[i] == t.type) continue;
    // Expanding to F32 is exact: only a lossy target counts as requantizing.
    if (!is_float_type(t.type) && types[i] != int(GgmlType::F32) && !o.allow_requantize)
      throw Error(src.path() + ": tensor '" + printable(t.name) + "' is already " + type_name(t.type) +
                  "; requantizing it to " + type_name(types[i]) + " loses quality (--allow-requantize to do it anyway)");
    if (!quant::ggml_can_quantize(types[i]))
      throw Error("tensor '" + printable(t.name) + "': Lumen cannot write type " + type_name(types[i]));
    if (!src.raw(i) && !quant::ggml_can_dequantize(t.type) && !is_float_type(t.type))
      throw Error(src.path() + ": tensor '" + printable(t.name) + "' has type " + type_name(t.type) + ", which Lumen cannot read");
  }

  // Metadata: the source's, with the file type, as llama-quantize writes it.
  formats::GgufMetadata md = src.metadata();
  md.set_u32("general.quantization_version", 2);
  md.set_u32("general.file_type", uint32_t(o.type));
  for (const char* k : {"split.no", "split.count", "split.tensors.count"}) md.remove(k);
  if (!importance.empty()) {
    md.set_string("quantize.imatrix.file", o.imatrix);
    if (!imatrix.datasets.empty()) md.set_string("quantize.imatrix.dataset", imatrix.datasets.front());
    md.set_u32("quantize.imatrix.entries_count", uint32_t(importance.size()));
    if (imatrix.chunk_count > 0) md.set_u32("quantize.imatrix.chunks_count", imatrix.chunk_count);
  }

  std::vector<std::string> names;
  for (const auto& t : tensors) names.push_back(t.name);
  const std::vector<size_t> order = quant::llama_tensor_order(names);
  std::vector<formats::GgufTensorInfo> infos;
  for (size_t i : order) infos.push_back({tensors[i].name, GgmlType(types[i]), tensors[i].ne});

  QuantizeResult result;
  result.imatrix_entries = int(importance.size());
  formats::GgufWriter writer(out, md, infos);
  std::vector<float> f32;
  std::vector<uint8_t> packed;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    const auto& t = tensors[i];
    const int to = types[i];
    const int64_t cols = t.ne[0], rows = rows_of(t);
    result.elements += cols * rows;
    const auto imp_it = importance.find(t.name);
    const float* imp = imp_it != importance.end() ? imp_it->second.data() : nullptr;
    result.tensors.push_back({t.name, t.type, to, imp != nullptr && to != t.type && !is_float_type(to)});
    if (to == t.type && src.raw(i)) {
      // Same type: the bytes as they are, in slabs (the source is mapped).
      const size_t bytes = writer.tensor_bytes(k);
      for (size_t off = 0; off < bytes; off += size_t(64) << 20) {
        writer.write(src.raw(i) + off, std::min(bytes - off, size_t(64) << 20));
        if (o.progress) o.progress(writer.written_bytes(), writer.total_bytes());
      }
      continue;
    }
    const size_t row_bytes = quant::ggml_row_bytes(to, cols);
    // Slabs within one matrix: a stack of matrices (experts) has importance per matrix.
    const int64_t matrix_rows = rows / matrices_of(t);
    const int64_t slab = std::max<int64_t>(1, (int64_t(64) << 20) / (cols * 4));
    for (int64_t r0 = 0; r0 < rows; r0 += slab) {
      const int64_t r1 = std::min({rows, r0 + slab, (r0 / matrix_rows + 1) * matrix_rows});
      f32.resize(size_t((r1 - r0) * cols));
      src.read_rows(i, r0, r1, f32.data());
      packed.resize(size_t(r1 - r0) * row_bytes);
      try {
        model::quantize_f32_rows(to, f32.data(), r1 - r0, cols, imp ? imp + (r0 / matrix_rows) * cols : nullptr,
                                 reinterpret_cast<std::byte*>(packed.data()));
      } catch (const Error& e) {
        throw Error(src.path() + ": tensor '" + printable(t.name) + "': " + e.what());
      }
      writer.write(packed.data(), packed.size());
      if (o.progress) o.progress(writer.written_bytes(), writer.total_bytes());
    }
  }
  writer.finish();
  result.bytes_out = writer.total_bytes();
  return result;
}

}  // namespace lumen::runtime
