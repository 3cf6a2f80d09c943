// lumen convert IN OUT [--quant TYPE] [--imatrix F]: a safetensors checkpoint to a packed .lmp
// file. TYPE is a llama.cpp file type (Q4_K_M, the default, also "q4"; Q8_0 = "q8"; Q6_K,
// Q5_K_M, ...): each matrix gets the type llama.cpp's mix gives it and is quantized by the
// quantizers of `lumen quantize` (model/quantize_weights.h), so the file holds the same bits
// as `--quant TYPE` at load makes of the checkpoint. f32, bf16 or f16: every matrix in that
// float format (the MoE router in bf16, f32 for f32). Norm gains and layer scalars are f32.
//
// lumen convert --synthetic CONFIG OUT --quant q4|q8|bf16|f32: a packed model of CONFIG's
// shapes with seeded random weights, generated straight into the int8 kernels' layouts (q4:
// Q4_0 blocks as Q4_0X4, q8: Q8_0X4; the per-layer input table row-major): random bytes for
// speed measurements, no quantizer involved.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <tuple>

#include <fmt/format.h>

#include "base/dtype.h"
#include "base/error.h"
#include "base/json.h"
#include "cli/command.h"
#include "cli/progress.h"
#include "formats/packed.h"
#include "formats/safetensors.h"
#include "model/quantize_weights.h"
#include "model/weights.h"
#include "quant/convert.h"
#include "quant/imatrix.h"
#include "quant/repack.h"
#include "spec/model_spec.h"

namespace {

using namespace lumen;
namespace fs = std::filesystem;

struct ConvertOptions {
  std::vector<std::string> paths;
  std::string synthetic, quant = "q4", imatrix;
  uint64_t seed = 1;
};

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open for reading");
  try {
    return lumen::parse_json(in);
  } catch (const nlohmann::json::exception&) {
    throw Error(path + ": not valid JSON");
  }
}

// The bar of cli/progress.h in bytes written.
class Progress {
 public:
  explicit Progress(uint64_t total) : bar_("convert"), total_(total) {}
  void update(uint64_t done) { bar_.update(done, total_, fmt::format("{:.2f} / {:.2f} GB", done / 1e9, total_ / 1e9)); }

 private:
  cli::ProgressBar bar_;
  uint64_t total_;
};

std::string storage_name(quant::WeightFormat f) {
  if (f == quant::WeightFormat::F32) return "F32";
  if (f == quant::WeightFormat::F16) return "F16";
  if (f == quant::WeightFormat::BF16) return "BF16";
  return quant::format_name(f);
}

// --synthetic's targets: the int8 kernels' interleaved layouts, or a float format.
quant::WeightFormat synthetic_format(const std::string& name) {
  if (name == "q4") return quant::WeightFormat::Q4_0X4;
  if (name == "q8") return quant::WeightFormat::Q8_0X4;
  if (name == "bf16") return quant::WeightFormat::BF16;
  if (name == "f32") return quant::WeightFormat::F32;
  throw Error("--quant with --synthetic: unknown layout " + in_quotes(name) + " (q4, q8, bf16, f32)");
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The format a tensor is stored in for a float or synthetic --quant target. Norm gains and
// scalars: f32. The per-layer input table: the target's row-major blocks (Q4_0 / Q8_0, when a
// row is whole blocks), since it is read a row at a time, never multiplied. The MoE router:
// bf16 (f32 for an f32 target), since its top-k choice is discrete and small errors would
// change which experts run. Everything else: the target.
quant::WeightFormat format_for(const spec::ExpectedTensor& t, quant::WeightFormat target) {
  if (t.shape.size() == 1) return quant::WeightFormat::F32;
  if (ends_with(t.name, "embed_tokens_per_layer.weight")) {
    const bool whole_blocks = t.shape[1] % 32 == 0;
    if (target == quant::WeightFormat::Q4_0X4) return whole_blocks ? quant::WeightFormat::Q4_0 : quant::WeightFormat::BF16;
    if (target == quant::WeightFormat::Q8_0X4) return whole_blocks ? quant::WeightFormat::Q8_0 : quant::WeightFormat::BF16;
    return target;
  }
  if (ends_with(t.name, "router.proj.weight"))
    return target == quant::WeightFormat::F32 ? quant::WeightFormat::F32 : quant::WeightFormat::BF16;
  return target;
}

// A 2-D tensor is one matrix; a 3-D one (the experts) is shape[0] matrices back to back.
int64_t matrix_count(const spec::ExpectedTensor& t) { return t.shape.size() == 3 ? t.shape[0] : 1; }
int64_t matrix_rows(const spec::ExpectedTensor& t) { return t.shape[t.shape.size() - 2]; }
int64_t matrix_cols(const spec::ExpectedTensor& t) { return t.shape.back(); }

struct PlannedTensor {
  spec::ExpectedTensor tensor;
  std::string name;  // with the checkpoint prefix
  quant::WeightFormat format = quant::WeightFormat::F32;
  const float* importance = nullptr;  // per matrix: cols values (imatrix), or nullptr
};

std::vector<PlannedTensor> plan_for(const spec::ModelSpec& spec, const std::string& prefix, quant::WeightFormat target) {
  std::vector<PlannedTensor> out;
  for (const auto& t : spec::expected_tensors(spec))
    out.push_back({t, t.name == "lm_head.weight" ? t.name : prefix + t.name, format_for(t, target)});
  return out;
}

// A quantized file type: each matrix in the format the mix gives it under its GGUF name (the
// same plan as `--quant` at load, the per-layer input table included), with its importance.
std::vector<PlannedTensor> plan_for(const spec::ModelSpec& spec, model::ModelWeights& bound, const model::QuantTarget& target,
                                    const std::map<std::string, std::vector<float>>& importance) {
  const auto named = model::named_weights(bound);
  const auto formats = model::plan_formats(spec, named, target, !importance.empty());
  std::map<std::string, std::pair<quant::WeightFormat, const float*>> by_name;
  for (size_t i = 0; i < named.size(); ++i) {
    const auto it = importance.find(named[i].gguf_name);
    by_name[named[i].checkpoint_name] = {formats[i], it == importance.end() ? nullptr : it->second.data()};
  }
  std::vector<PlannedTensor> out;
  for (const auto& t : spec::expected_tensors(spec)) {
    PlannedTensor p{t, t.name == "lm_head.weight" ? t.name : bound.name_prefix + t.name, quant::WeightFormat::F32};
    if (t.shape.size() > 1) {
      const auto it = by_name.find(t.name);
      if (it == by_name.end()) throw Error("convert: no quantization plan for tensor '" + p.name + "'");
      std::tie(p.format, p.importance) = it->second;
    }
    out.push_back(std::move(p));
  }
  return out;
}

// "Q4_K x 12, Q6_K x 3": the matrix formats of a plan, for the summary line.
std::string format_counts(const std::vector<PlannedTensor>& plan) {
  std::map<std::string, int> counts;
  for (const auto& p : plan)
    if (p.tensor.shape.size() > 1) ++counts[storage_name(p.format)];
  std::string out;
  for (const auto& [name, n] : counts) out += fmt::format("{}{} x{}", out.empty() ? "" : ", ", name, n);
  return out;
}

std::vector<formats::PackedTensorEntry> table_for(const std::vector<PlannedTensor>& plan) {
  std::vector<formats::PackedTensorEntry> entries;
  for (const auto& p : plan) {
    const auto& t = p.tensor;
    if (t.shape.size() == 1)
      entries.push_back({p.name, "F32", t.shape, size_t(t.shape[0]) * 4});
    else
      entries.push_back({p.name, storage_name(p.format), t.shape,
                         size_t(matrix_count(t)) * quant::format_storage_bytes(p.format, matrix_rows(t), matrix_cols(t))});
  }
  return entries;
}

// Rows per write: whole row groups, about 16 MiB of f32 work at a time.
int64_t rows_per_step(int64_t cols) {
  return std::max<int64_t>(4, (int64_t(16) << 20) / (cols * 4) / 4 * 4);
}

std::string convert_checkpoint(const ConvertOptions& o, const std::string& in, const std::string& out) {
  const model::QuantTarget target = model::parse_quant_target(o.quant, "--quant");
  if (!o.imatrix.empty() && !target.mix)
    throw Error("--imatrix " + o.imatrix + ": an importance matrix weights a quantizer; --quant " + o.quant +
                " is a float format");
  std::error_code ec;
  if (!fs::is_directory(in, ec)) throw Error(in + ": not a model directory (expected config.json and *.safetensors)");
  const nlohmann::json config = read_json((fs::path(in) / "config.json").string());
  const spec::ModelSpec spec = spec::load_spec(in);
  const auto ckpt = formats::SafetensorsCheckpoint::open(in);
  // Binding checks every tensor (presence, dtype, shape, no strays) before anything is written.
  model::ModelWeights bound = model::bind_weights(
      spec, [&](const std::string& name) { return ckpt.find(name); }, ckpt.names(), in);
  std::map<std::string, std::vector<float>> importance;
  if (!o.imatrix.empty()) {
    std::map<std::string, quant::ImatrixTensorShape> shapes;
    for (const auto& n : model::named_weights(bound)) shapes[n.gguf_name] = {n.cols(), n.count()};
    importance = quant::imatrix_importance_for(quant::read_imatrix(o.imatrix), o.imatrix, shapes, in);
  }
  const auto plan = target.mix ? plan_for(spec, bound, target, importance) : plan_for(spec, bound.name_prefix, target.format);
  auto entries = table_for(plan);
  nlohmann::json header = {{"architecture", formats::kPackedArchitecture}, {"config", config},
                           {"quant", target.name}, {"source", fs::path(in).filename().string()}};
  if (!importance.empty()) header["imatrix"] = fs::path(o.imatrix).filename().string();
  formats::PackedWriter writer(out, header, entries);
  Progress progress(writer.total_bytes());
  std::vector<std::byte> buf;
  std::vector<float> vec;
  for (const auto& p : plan) {
    const formats::TensorView* t = ckpt.find(p.name);
    const quant::WeightFormat fmt = t->dtype == DType::F32 ? quant::WeightFormat::F32
                                    : t->dtype == DType::F16 ? quant::WeightFormat::F16 : quant::WeightFormat::BF16;
    if (p.tensor.shape.size() == 1) {
      vec.resize(size_t(p.tensor.shape[0]));
      quant::to_f32(fmt, t->data, p.tensor.shape[0], vec.data());
      writer.write(vec.data(), vec.size() * 4);
      continue;
    }
    const int64_t rows = matrix_rows(p.tensor), cols = matrix_cols(p.tensor);
    const size_t src_bytes = quant::format_storage_bytes(fmt, rows, cols);
    for (int64_t m = 0; m < matrix_count(p.tensor); ++m) {
      // Mapped safetensors data is at least 2-byte aligned for 16-bit types; f32 rows are read
      // through dequantize_row's memcpy, so alignment does not matter here.
      const quant::WeightMatrix src{fmt, rows, cols, t->data + size_t(m) * src_bytes};
      const int64_t step = rows_per_step(cols);
      for (int64_t r0 = 0; r0 < rows; r0 += step) {
        const int64_t r1 = std::min(rows, r0 + step);
        buf.resize(quant::format_storage_bytes(p.format, r1 - r0, cols));
        if (p.format == fmt) {
          std::memcpy(buf.data(), static_cast<const std::byte*>(src.data) + size_t(r0) * src.row_bytes(), buf.size());
        } else {
          try {
            model::quantize_matrix_rows(src, p.format, r0, r1, p.importance ? p.importance + m * cols : nullptr, buf.data());
          } catch (const Error& e) {
            throw Error(t->file + ": tensor '" + p.name + "': " + e.what());
          }
        }
        writer.write(buf.data(), buf.size());
        progress.update(writer.written_bytes());
      }
    }
  }
  writer.finish();
  progress.update(writer.total_bytes());
  return target.mix ? target.name + ": " + format_counts(plan) : target.name;
}

// xorshift64*: fast, seeded, good enough for random weights.
struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1DULL;
  }
};

// Random ggml Q4_0 / Q8_0 blocks for one row of `cols` values of standard deviation `std`:
// uniform codes with a per-block scale jittered +-25%.
void random_blocks(Rng& rng, bool q4, int64_t cols, float std, uint8_t* out) {
  const size_t bb = q4 ? 18 : 34;
  const float code_std = q4 ? 4.61f : 73.6f;  // std of uniform codes -8..7 / -128..127
  for (int64_t b = 0; b < (cols + 31) / 32; ++b) {
    uint8_t* blk = out + size_t(b) * bb;
    const uint64_t r = rng.next();
    const float jitter = 0.75f + 0.5f * float(r >> 40) / float(1 << 24);
    const uint16_t d = quant::f32_to_f16(std / code_std * jitter);
    std::memcpy(blk, &d, 2);
    for (size_t k = 2; k < bb; k += 8) {
      const uint64_t v = rng.next();
      std::memcpy(blk + k, &v, std::min<size_t>(8, bb - k));
    }
  }
}

std::string write_synthetic(const ConvertOptions& o, const std::string& config_path, const std::string& out) {
  const quant::WeightFormat target = synthetic_format(o.quant);
  if (!o.imatrix.empty()) throw Error("--imatrix: a synthetic model has random weights, nothing to weight");
  const nlohmann::json config = read_json(config_path);
  const spec::ModelSpec spec = spec::spec_from_hf_config(config, config_path);
  const std::string prefix = "model.language_model.";
  const auto plan = plan_for(spec, prefix, target);
  auto entries = table_for(plan);
  nlohmann::json header = {{"architecture", formats::kPackedArchitecture}, {"config", config}, {"quant", o.quant},
                           {"source", "synthetic:" + fs::path(config_path).filename().string()},
                           {"seed", o.seed}};
  formats::PackedWriter writer(out, header, entries);
  Progress progress(writer.total_bytes());
  Rng rng{o.seed * 0x9E3779B97F4A7C15ULL + 1};
  std::vector<std::byte> buf;
  std::vector<uint8_t> blocks;
  std::vector<float> row;
  for (const auto& p : plan) {
    const auto& t = p.tensor;
    if (t.shape.size() == 1) {
      std::vector<float> ones(size_t(t.shape[0]), 1.0f);  // norm gains, layer scalars, expert scales: 1
      writer.write(ones.data(), ones.size() * 4);
      continue;
    }
    const int64_t rows = matrix_rows(t), cols = matrix_cols(t);
    const quant::WeightFormat target_fmt = p.format;
    const bool q4 = target_fmt == quant::WeightFormat::Q4_0X4 || target_fmt == quant::WeightFormat::Q4_0;
    const bool blocky = q4 || target_fmt == quant::WeightFormat::Q8_0X4 || target_fmt == quant::WeightFormat::Q8_0;
    const size_t bb = q4 ? 18 : 34;
    const int64_t nb = (cols + 31) / 32;
    // Weights of standard deviation about 1/sqrt(cols), as an initializer would give.
    const float target_std = 1.0f / std::sqrt(float(cols));
    const int64_t step = rows_per_step(cols);
    for (int64_t m = 0; m < matrix_count(t); ++m) {
      for (int64_t r0 = 0; r0 < rows; r0 += step) {
        const int64_t r1 = std::min(rows, r0 + step);
        buf.resize(quant::converted_bytes(target_fmt, cols, r0, r1));
        if (quant::is_interleaved(target_fmt)) {
          blocks.resize(size_t(4 * nb) * bb);
          const size_t group_bytes = quant::format_storage_bytes(target_fmt, 4, cols);
          for (int64_t g = r0; g < r1; g += 4) {
            const uint8_t* ptrs[4] = {};
            for (int i = 0; i < 4 && g + i < rows; ++i) {
              uint8_t* rowb = blocks.data() + size_t(i * nb) * bb;
              random_blocks(rng, q4, cols, target_std, rowb);
              ptrs[i] = rowb;
            }
            std::byte* dst = buf.data() + size_t((g - r0) / 4) * group_bytes;
            if (q4) quant::pack_group_q4_0x4(ptrs, nb * 32, dst);
            else quant::pack_group_q8_0x4(ptrs, nb * 32, dst);
          }
        } else if (blocky) {
          const size_t rb = quant::format_row_bytes(target_fmt, cols);
          for (int64_t r = r0; r < r1; ++r)
            random_blocks(rng, q4, cols, target_std, reinterpret_cast<uint8_t*>(buf.data() + size_t(r - r0) * rb));
        } else {
          row.resize(size_t(cols));
          const size_t rb = quant::format_row_bytes(target_fmt, cols);
          for (int64_t r = r0; r < r1; ++r) {
            for (auto& v : row) v = (float(rng.next() >> 40) / float(1 << 24) - 0.5f) * 3.4641f * target_std;
            const quant::WeightMatrix one{quant::WeightFormat::F32, 1, cols, row.data()};
            quant::convert_rows(one, target_fmt, 0, 1, buf.data() + size_t(r - r0) * rb);
          }
        }
        writer.write(buf.data(), buf.size());
        progress.update(writer.written_bytes());
      }
    }
  }
  writer.finish();
  progress.update(writer.total_bytes());
  return "synthetic " + o.quant;
}

LUMEN_COMMAND(70, [](CLI::App& app) {
  auto opts = std::make_shared<ConvertOptions>();
  auto* cmd = app.add_subcommand("convert", "Convert a safetensors checkpoint to a packed .lmp model (or make a synthetic one)");
  cmd->add_option("paths", opts->paths, "IN OUT (a model directory and the .lmp to write); with --synthetic only OUT")
      ->required();
  cmd->add_option("--quant", opts->quant,
                  "Weights: a llama.cpp file type, with the mix and quantizers of `lumen quantize --type` (" +
                      model::quant_target_names() + "; default q4; F32, BF16, F16: every matrix in that float format). "
                      "With --synthetic: q4 (Q4_0X4), q8 (Q8_0X4), bf16, f32");
  cmd->add_option("--imatrix", opts->imatrix, "Importance matrix for the quantizers (`lumen imatrix`, or llama.cpp's)");
  cmd->add_option("--synthetic", opts->synthetic, "HF config.json: write random weights of its shapes instead");
  cmd->add_option("--seed", opts->seed, "Seed of the synthetic weights (default 1)");
  return std::pair{cmd, lumen::cli::Runner([opts] {
    const auto start = std::chrono::steady_clock::now();
    std::string out, what;
    if (!opts->synthetic.empty()) {
      if (opts->paths.size() != 1) throw Error("convert --synthetic CONFIG OUT: expected exactly one path (OUT)");
      out = opts->paths[0];
      what = write_synthetic(*opts, opts->synthetic, out);
    } else {
      if (opts->paths.size() != 2) throw Error("convert IN OUT: expected two paths");
      out = opts->paths[1];
      what = convert_checkpoint(*opts, opts->paths[0], out);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("wrote {} ({:.2f} GB, {}) in {:.1f} s\n", out, double(fs::file_size(out)) / 1e9, what, s);
    return 0;
  })};
});

}  // namespace
