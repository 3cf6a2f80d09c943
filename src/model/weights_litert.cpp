// Binding of a LiteRT-LM package's TFLite constants to the decoder's weights (weights_litert.h).
#include "model/weights_litert.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "base/error.h"
#include "quant/int4.h"
#include "quant/repack.h"

namespace lumen::model {
namespace {

using formats::TfliteType;

// A constant decoded to row-major rows in one of three forms; rows can be sliced (fused q/k/v)
// before they are packed for the kernels.
struct Rows {
  enum Kind { F32, Q4_0, Q8_0 } kind = F32;
  int64_t rows = 0, cols = 0;
  std::vector<std::byte> bytes;  // F32: floats; Q4_0: 18-byte blocks; Q8_0: 34-byte blocks
  size_t row_bytes() const {
    return kind == F32 ? size_t(cols) * 4 : size_t(cols / 32) * (kind == Q4_0 ? 18 : 34);
  }
};

bool f16_exact(float s) {
  const uint16_t h = quant::f32_to_f16(s);
  float back = 0;
  quant::to_f32(quant::WeightFormat::F16, &h, 1, &back);
  return back == s && std::isfinite(s);
}

std::string where_of(const spec::PackageConstants& pc, const spec::PackageConstant& c) {
  return pc.package + ": " + c.describe();
}

// Per-row scale and zero point of a quantized constant of `rows` rows.
struct RowQuant {
  std::vector<float> scale;
  std::vector<int64_t> zero_point;
};

RowQuant row_quant(const spec::PackageConstants& pc, const spec::PackageConstant& c, const spec::LitertMap& map,
                   int64_t rows) {
  RowQuant q;
  const std::string at = where_of(pc, c);
  if (!c.quantization || c.quantization->scale.empty()) {
    if (c.type == TfliteType::INT4 && map.fixed_int4) {
      q.scale.assign(size_t(rows), map.fixed_int4->scale);
      q.zero_point.assign(size_t(rows), map.fixed_int4->offset_binary ? 8 : 0);
      return q;
    }
    throw Error(at + ": has no quantization parameters" +
                (c.type == TfliteType::INT4 ? std::string(" and the map declares no fixed_int4 scale") : std::string()));
  }
  const auto& tq = *c.quantization;
  if (tq.details_type != 0)
    throw Error(at + ": quantization details type " + std::to_string(tq.details_type) + " (blockwise/custom) is not supported");
  const size_t n = tq.scale.size();
  if (n != 1 && (tq.quantized_dimension != 0 || int64_t(n) != rows))
    throw Error(at + ": per-channel quantization along dimension " + std::to_string(tq.quantized_dimension) + " with " +
                std::to_string(n) + " scales; Lumen reads one scale per output row (dimension 0)");
  for (int64_t r = 0; r < rows; ++r) {
    q.scale.push_back(tq.scale[n == 1 ? 0 : size_t(r)]);
    const size_t zn = tq.zero_point.size();
    q.zero_point.push_back(zn == 0 ? 0 : tq.zero_point[zn == 1 ? 0 : size_t(r)]);
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (!(std::isfinite(q.scale[size_t(r)])))
      throw Error(at + ": scale of row " + std::to_string(r) + " is not finite");
    if (c.type == TfliteType::INT4 && q.zero_point[size_t(r)] != 0 && q.zero_point[size_t(r)] != 8)
      throw Error(at + ": int4 zero point " + std::to_string(q.zero_point[size_t(r)]) + " (Lumen reads 0 or 8)");
  }
  return q;
}

int int4_value(uint8_t nibble, int64_t zero_point) {
  return zero_point == 8 ? int(nibble) - 8 : (nibble & 8 ? int(nibble) - 16 : int(nibble));
}

// TFLite blockwise INT4 (litert-torch's int4): signed nibbles, one scale per `block_size`
// elements of a row from a separate FLOAT16/FLOAT32 tensor [rows, cols / block_size]. Blocks
// of 32 with f16 scales are exactly ggml Q4_0 blocks (d = the scale, nibble + 8).
Rows decode_blockwise_int4(const spec::PackageConstants& pc, const spec::PackageConstant& c, const uint8_t* raw,
                           int64_t rows, int64_t cols, LitertTarget target) {
  const std::string at = where_of(pc, c);
  const auto& b = *c.block;
  if (b.has_zero_points) throw Error(at + ": blockwise quantization with zero points is not supported");
  if (b.block_size <= 0 || cols % b.block_size != 0)
    throw Error(at + ": block size " + std::to_string(b.block_size) + " does not divide the row length " + std::to_string(cols));
  const int64_t per_row = cols / b.block_size;
  int64_t scale_count = 1;
  for (int32_t d : b.shape) scale_count *= d;
  const int elem = b.type == TfliteType::FLOAT16 ? 2 : b.type == TfliteType::FLOAT32 ? 4 : 0;
  if (elem == 0 || scale_count != rows * per_row || int64_t(b.bytes.size()) != scale_count * elem)
    throw Error(at + ": its block scales tensor (" + std::string(formats::tflite_type_name(b.type) ? formats::tflite_type_name(b.type) : "?") +
                ", " + std::to_string(b.bytes.size()) + " bytes) is not FLOAT16/FLOAT32 [" + std::to_string(rows) + ", " +
                std::to_string(per_row) + "]");
  std::vector<float> scale(static_cast<size_t>(scale_count));
  if (elem == 2) {
    std::vector<uint16_t> h(static_cast<size_t>(scale_count));
    std::memcpy(h.data(), b.bytes.data(), b.bytes.size());
    quant::to_f32(quant::WeightFormat::F16, h.data(), scale_count, scale.data());
  } else {
    std::memcpy(scale.data(), b.bytes.data(), b.bytes.size());
  }
  for (float x : scale)
    if (!std::isfinite(x)) throw Error(at + ": a block scale is not finite");
  Rows out;
  out.rows = rows;
  out.cols = cols;
  bool blocks = target == LitertTarget::Kernels && b.block_size == 32;
  for (size_t i = 0; blocks && i < scale.size(); ++i) blocks = f16_exact(scale[i]);
  if (blocks) {
    out.kind = Rows::Q4_0;
    out.bytes.resize(size_t(rows) * out.row_bytes());
    auto* dst = reinterpret_cast<uint8_t*>(out.bytes.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < per_row; ++k, dst += 18)
        quant::int4_per_channel_row_to_q4_0(raw + (r * cols + k * 32) / 2, 32, scale[size_t(r * per_row + k)], 0, dst);
    return out;
  }
  out.kind = Rows::F32;
  out.bytes.resize(size_t(rows * cols) * 4);
  auto* f = reinterpret_cast<float*>(out.bytes.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols; ++i) {
      const int64_t e = r * cols + i;
      const uint8_t nib = e % 2 ? raw[e / 2] >> 4 : raw[e / 2] & 0x0f;
      f[e] = scale[size_t(r * per_row + i / b.block_size)] * float(int4_value(nib, 0));
    }
  return out;
}

Rows decode_rows(const spec::PackageConstants& pc, const spec::PackageConstant& c, const spec::LitertMap& map,
                 int64_t rows, int64_t cols, LitertTarget target) {
  const std::string at = where_of(pc, c);
  const uint64_t n = uint64_t(rows) * uint64_t(cols);
  const int bits = formats::tflite_type_bits(c.type);
  if (bits == 0 || uint64_t(c.bytes.size()) * 8 != n * uint64_t(bits))
    throw Error(at + ": holds " + std::to_string(c.bytes.size()) + " bytes, not what its type and shape need");
  const auto* raw = reinterpret_cast<const uint8_t*>(c.bytes.data());
  Rows out;
  out.rows = rows;
  out.cols = cols;
  auto as_f32 = [&](auto value_at) {
    out.kind = Rows::F32;
    out.bytes.resize(size_t(n) * 4);
    auto* f = reinterpret_cast<float*>(out.bytes.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < cols; ++i) f[r * cols + i] = value_at(r, i);
  };
  switch (c.type) {
    case TfliteType::FLOAT32: {
      out.kind = Rows::F32;
      out.bytes.resize(size_t(n) * 4);
      std::memcpy(out.bytes.data(), raw, size_t(n) * 4);
      return out;
    }
    case TfliteType::FLOAT16:
    case TfliteType::BFLOAT16: {
      out.kind = Rows::F32;
      out.bytes.resize(size_t(n) * 4);
      std::vector<uint16_t> h(static_cast<size_t>(n));
      std::memcpy(h.data(), raw, size_t(n) * 2);
      quant::to_f32(c.type == TfliteType::FLOAT16 ? quant::WeightFormat::F16 : quant::WeightFormat::BF16, h.data(),
                    int64_t(n), reinterpret_cast<float*>(out.bytes.data()));
      return out;
    }
    case TfliteType::INT8: {
      const RowQuant q = row_quant(pc, c, map, rows);
      const auto* v = reinterpret_cast<const int8_t*>(raw);
      bool blocks = target == LitertTarget::Kernels && cols % 32 == 0;
      for (int64_t r = 0; blocks && r < rows; ++r)
        blocks = q.zero_point[size_t(r)] == 0 && f16_exact(q.scale[size_t(r)]);
      if (!blocks) {
        as_f32([&](int64_t r, int64_t i) {
          return q.scale[size_t(r)] * float(int64_t(v[r * cols + i]) - q.zero_point[size_t(r)]);
        });
        return out;
      }
      out.kind = Rows::Q8_0;
      out.bytes.resize(size_t(rows) * out.row_bytes());
      auto* dst = reinterpret_cast<uint8_t*>(out.bytes.data());
      for (int64_t r = 0; r < rows; ++r) {
        const uint16_t d = quant::f32_to_f16(q.scale[size_t(r)]);
        for (int64_t b = 0; b < cols / 32; ++b, dst += 34) {
          std::memcpy(dst, &d, 2);
          std::memcpy(dst + 2, v + r * cols + b * 32, 32);
        }
      }
      return out;
    }
    case TfliteType::INT4: {
      if (c.block) return decode_blockwise_int4(pc, c, raw, rows, cols, target);
      const RowQuant q = row_quant(pc, c, map, rows);
      auto nibble = [&](int64_t e) -> uint8_t { return e % 2 ? raw[e / 2] >> 4 : raw[e / 2] & 0x0f; };
      bool blocks = target == LitertTarget::Kernels && cols % 32 == 0;
      for (int64_t r = 0; blocks && r < rows; ++r) blocks = f16_exact(q.scale[size_t(r)]);
      if (!blocks) {
        as_f32([&](int64_t r, int64_t i) {
          return q.scale[size_t(r)] * float(int4_value(nibble(r * cols + i), q.zero_point[size_t(r)]));
        });
        return out;
      }
      out.kind = Rows::Q4_0;
      out.bytes.resize(size_t(rows) * out.row_bytes());
      for (int64_t r = 0; r < rows; ++r)
        quant::int4_per_channel_row_to_q4_0(raw + r * cols / 2, cols, q.scale[size_t(r)], int(q.zero_point[size_t(r)]),
                                            reinterpret_cast<uint8_t*>(out.bytes.data()) + size_t(r) * out.row_bytes());
      return out;
    }
    default: {
      const char* t = formats::tflite_type_name(c.type);
      throw Error(at + ": type " + std::string(t ? t : "?") + " is not a weight type Lumen reads (FLOAT32, FLOAT16, BFLOAT16, INT8, INT4)");
    }
  }
}

// `row_major`: keep ggml rows as they are (a table read a row at a time, never multiplied).
LitertTensor pack(const Rows& rows, int64_t first, int64_t count, LitertTarget target, bool is_vector,
                  bool row_major = false) {
  LitertTensor t;
  const size_t rb = rows.row_bytes();
  const std::byte* base = rows.bytes.data() + size_t(first) * rb;
  if (rows.kind == Rows::F32 || is_vector) {
    t.format = quant::WeightFormat::F32;
    t.data.assign(base, base + size_t(count) * rb);
    return t;
  }
  if (row_major) {
    t.format = rows.kind == Rows::Q4_0 ? quant::WeightFormat::Q4_0 : quant::WeightFormat::Q8_0;
    t.data.assign(base, base + size_t(count) * rb);
    return t;
  }
  (void)target;
  std::vector<const void*> ptrs(static_cast<size_t>(count));
  for (int64_t r = 0; r < count; ++r) ptrs[size_t(r)] = base + size_t(r) * rb;
  if (rows.kind == Rows::Q4_0) {
    t.format = quant::WeightFormat::Q4_0X4;
    t.data.resize(quant::q4_0x4_bytes(count, rows.cols));
    quant::q4_0_rows_to_x4(ptrs.data(), count, rows.cols, t.data.data());
  } else {
    t.format = quant::WeightFormat::Q8_0X4;
    t.data.resize(quant::q8_0x4_bytes(count, rows.cols));
    quant::q8_0_rows_to_x4(ptrs.data(), count, rows.cols, t.data.data());
  }
  return t;
}


}  // namespace

std::vector<LitertTensor> decode_litert_entry(const spec::ModelSpec& spec, const spec::PackageConstants& pc,
                                              const spec::LitertMap& map, const spec::MapEntry& e,
                                              LitertTarget target) {
  const spec::PackageConstant& c = pc.constants.at(e.constant);
  const std::string at = where_of(pc, c);
  // What the spec needs for each produced (layer, role).
  std::map<std::string, std::vector<int64_t>> expected;
  for (const auto& t : spec::expected_tensors(spec)) expected.emplace(t.name, t.shape);
  if (e.layer >= spec.num_layers())
    throw Error(at + ": maps to " + spec::layer_role_text(e.layer, e.role) + " but the model has " +
                std::to_string(spec.num_layers()) + " layers");

  std::vector<std::pair<std::string, int64_t>> parts;  // (role, rows) in storage order
  int64_t cols = 0;
  if (e.transform == spec::MapTransform::SplitQkv) {
    const spec::LayerSpec& ls = spec.layers[size_t(e.layer)];
    const int64_t q = int64_t(ls.num_q_heads) * ls.head_dim, kv = int64_t(ls.num_kv_heads) * ls.head_dim;
    parts = {{"self_attn.q_proj", q}, {"self_attn.k_proj", kv}};
    if (!ls.k_eq_v) parts.push_back({"self_attn.v_proj", kv});
    cols = spec.hidden_size;
  } else {
    const std::string name = spec::checkpoint_name(e.layer, e.role);
    auto it = expected.find(name);
    if (it == expected.end())
      throw Error(at + ": maps to " + spec::layer_role_text(e.layer, e.role) + ", which the model spec does not have");
    const auto& shape = it->second;
    parts = {{e.role, shape.size() == 2 ? shape[0] : 1}};
    cols = shape.size() == 2 ? shape[1] : shape[0];
  }
  int64_t total_rows = 0;
  for (const auto& p : parts) total_rows += p.second;
  // The constant's shape, leading 1s dropped, must be [rows, cols] ([cols] for a vector).
  std::vector<int64_t> have(c.shape.begin(), c.shape.end());
  while (have.size() > 1 && have.front() == 1) have.erase(have.begin());
  const bool is_vector = parts.size() == 1 && expected.count(spec::checkpoint_name(e.layer, e.role)) &&
                         expected[spec::checkpoint_name(e.layer, e.role)].size() == 1;
  const std::vector<int64_t> want = is_vector ? std::vector<int64_t>{cols} : std::vector<int64_t>{total_rows, cols};
  if (have != want)
    throw Error(at + ": maps to " + spec::layer_role_text(e.layer, e.role) + ", which the model spec needs as " +
                formats::shape_to_string(want));

  const Rows rows = decode_rows(pc, c, map, is_vector ? 1 : total_rows, cols, target);
  std::vector<LitertTensor> out;
  int64_t first = 0;
  for (const auto& [role, count] : parts) {
    LitertTensor t = pack(rows, first, count, target, is_vector, role == "embed_tokens_per_layer");
    first += count;
    t.layer = e.layer;
    t.role = role;
    t.name = spec::checkpoint_name(e.layer, role);
    t.constant = c.index;
    t.shape = is_vector ? std::vector<int64_t>{cols} : std::vector<int64_t>{count, cols};
    if (e.transform == spec::MapTransform::GainPlusOne || e.transform == spec::MapTransform::GainMinusOne ||
        e.transform == spec::MapTransform::GainAsApplied) {
      if (t.format != quant::WeightFormat::F32 || !is_vector)
        throw Error(at + ": transform " + spec::transform_name(e.transform) + " applies to a gain vector only");
      auto* f = reinterpret_cast<float*>(t.data.data());
      const float add = e.transform == spec::MapTransform::GainPlusOne    ? 1.0f
                        : e.transform == spec::MapTransform::GainMinusOne ? -1.0f
                        : spec.norm_weight_offset                         ? -1.0f
                                                                          : 0.0f;
      for (int64_t i = 0; i < cols; ++i) f[i] += add;
    }
    out.push_back(std::move(t));
  }
  return out;
}

ModelWeights bind_litert_weights(const spec::ModelSpec& spec, const spec::PackageConstants& pc,
                                 const spec::LitertMap& map, LitertTarget target) {
  // First what the map provides against what the spec needs (the root cause of a layer
  // missing), then the constants' types and shapes.
  std::map<std::string, int> provided;  // checkpoint name -> layer
  std::set<int> layers;
  for (const spec::MapEntry& e : map.entries) {
    if (e.layer >= 0) layers.insert(e.layer);
    if (e.transform == spec::MapTransform::SplitQkv) {
      provided.emplace(spec::checkpoint_name(e.layer, "self_attn.q_proj"), e.layer);
      provided.emplace(spec::checkpoint_name(e.layer, "self_attn.k_proj"), e.layer);
      if (e.layer < spec.num_layers() && !spec.layers[size_t(e.layer)].k_eq_v)
        provided.emplace(spec::checkpoint_name(e.layer, "self_attn.v_proj"), e.layer);
    } else {
      provided.emplace(spec::checkpoint_name(e.layer, e.role), e.layer);
    }
  }
  const std::string how = map.kind == "file" ? "map " + map.path : std::string("the name rules");
  const std::string cover = layers.empty() ? std::string("no layer")
                                           : "layers " + std::to_string(*layers.begin()) + ".." +
                                                 std::to_string(*layers.rbegin()) + " (" + std::to_string(layers.size()) +
                                                 " of " + std::to_string(spec.num_layers()) + ")";
  // A layer with nothing at all mapped to it is the finding (as the 12B package's 47 groups
  // for 48 layers); a single missing role otherwise.
  for (int l = 0; l < spec.num_layers(); ++l)
    if (!layers.count(l))
      throw Error(pc.package + ": no constant maps to layer " + std::to_string(l) + " (mapped by " + how +
                  "; the package's constants cover " + cover + "); `lumen verify` tells which source layer lacks a group");
  for (const auto& want : spec::expected_tensors(spec)) {
    if (provided.count(want.name)) continue;
    const spec::NamedRole missing = spec::role_of_tensor_name(want.name);
    throw Error(pc.package + ": no constant maps to " + spec::layer_role_text(missing.layer, missing.role) + " (mapped by " + how +
                "; the package's constants cover " + cover + "); `lumen verify` tells which source layer lacks a group");
  }
  std::vector<LitertTensor> tensors;
  std::map<std::string, size_t> by_name;
  for (const spec::MapEntry& e : map.entries) {
    for (LitertTensor& t : decode_litert_entry(spec, pc, map, e, target)) {
      auto [it, fresh] = by_name.emplace(t.name, tensors.size());
      if (!fresh)
        throw Error(pc.package + ": " + pc.constants[t.constant].describe() + " and " +
                    pc.constants[tensors[it->second].constant].describe() + " both give " +
                    spec::layer_role_text(t.layer, t.role));
      tensors.push_back(std::move(t));
    }
  }
  std::map<std::string, formats::TensorView> views;
  std::vector<std::string> names;
  for (const auto& t : tensors) {
    formats::TensorView v;
    v.name = t.name == "lm_head.weight" ? t.name : "model." + t.name;
    v.shape = t.shape;
    v.data = t.data.data();
    v.nbytes = t.data.size();
    v.file = pc.package;
    if (t.format == quant::WeightFormat::F32) {
      v.dtype = DType::F32;
    } else {
      v.dtype = DType::U8;
      v.storage_format = quant::format_name(t.format);
    }
    names.push_back(v.name);
    views.emplace(v.name, std::move(v));
  }
  ModelWeights w = bind_weights(
      spec, [&](const std::string& n) -> const formats::TensorView* {
        auto it = views.find(n);
        return it == views.end() ? nullptr : &it->second;
      },
      names, pc.package);
  for (auto& t : tensors) w.owned.push_back(std::move(t.data));  // the matrices point into these
  return w;
}

}  // namespace lumen::model
