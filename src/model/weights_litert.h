// The decoder's weights from a LiteRT-LM package's TFLite constants, through the declared map
// of spec/litert_map.h.
//
// Storage at load (target Kernels):
//   INT4 (per-tensor or per-channel scale, zero point 0 or 8; or no quantization parameters
//        with the map's fixed_int4, e.g. LiteRT's w = (nibble - 8) * 0.0625) whose scales are
//        f16 values and whose rows are whole 32-element blocks -> Q4_0X4, nibbles moved 1:1
//        (never expanded to floats);
//   INT8 zero point 0 with f16-value scales, whole blocks -> Q8_0X4, 1:1;
//   anything else (other scales, odd widths, f16/bf16/f32) -> f32, dequantized exactly.
// Target F32 dequantizes everything exactly (what `lumen verify` compares).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "model/weights.h"
#include "quant/weight_matrix.h"
#include "spec/litert_map.h"
#include "spec/model_spec.h"

namespace lumen::model {

enum class LitertTarget { Kernels, F32 };

struct LitertTensor {
  int layer = -1;
  std::string role;  // "self_attn.q_proj", ...; a fused constant yields one tensor per part
  std::string name;  // checkpoint name without the "model." prefix (spec::checkpoint_name)
  size_t constant = 0;
  std::vector<int64_t> shape;
  quant::WeightFormat format = quant::WeightFormat::F32;
  std::vector<std::byte> data;
};

// Decodes one map entry (a fused entry gives several tensors). Checks the constant's type,
// quantization and shape against what the spec needs for (layer, role); throws lumen::Error
// naming the package and the constant.
std::vector<LitertTensor> decode_litert_entry(const spec::ModelSpec& spec, const spec::PackageConstants& constants,
                                              const spec::LitertMap& map, const spec::MapEntry& entry,
                                              LitertTarget target);

// Every tensor the spec needs, from the map. A (layer, role) the spec needs that no constant
// maps to, or a mapped one it does not need, is one lumen::Error line naming it.
ModelWeights bind_litert_weights(const spec::ModelSpec& spec, const spec::PackageConstants& constants,
                                 const spec::LitertMap& map, LitertTarget target = LitertTarget::Kernels);

}  // namespace lumen::model
