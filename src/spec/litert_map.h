// The declared map from a LiteRT-LM package's TFLite constants to the model's tensors.
//
// A package's constants are the tensors of its TFLiteModel sections that hold data, one entry
// per distinct buffer (prefill and decode subgraphs share buffers), numbered in order of first
// appearance (section, subgraph, tensor). Each constant is mapped to (layer, role) — role is
// the checkpoint's tensor name without "layers.N." and ".weight" ("self_attn.q_proj",
// "mlp.down_proj", "input_layernorm", "layer_scalar", the per-layer input roles
// "per_layer_input_gate", "per_layer_projection", "post_per_layer_input_norm"; layer -1 for
// "embed_tokens", "norm", "lm_head" and the per-layer input table "embed_tokens_per_layer",
// "per_layer_model_projection", "per_layer_projection_norm", wherever the package keeps them:
// E2B/E4B packages hold the tables in their embedder and per-layer embedder sections) — in
// one of two declared ways, never by "the next tensor of this shape":
//
//   * name rules: a constant one of whose names (or one of their ';'-joined parts) is a
//     recognised tensor name: Hugging Face names ("model.layers.3.self_attn.q_proj.weight",
//     "model.language_model...", the fused "self_attn.qkv_proj" split into q, k, v), and
//     litert-torch's module paths (".../DecoderBlock_3/.../Linear_qkv_projection" -> fused
//     q/k/v, Linear_output_projection -> o_proj, GatedFeedForward_ff/Linear_w1 -> gate_proj,
//     Linear_w3 -> up_proj, Linear_w2 -> down_proj, RMSNorm_pre_atten_norm -> input_layernorm,
//     RMSNorm_post_atten_norm, RMSNorm_pre_ff_norm, RMSNorm_post_ff_norm, RMSNorm_query_norm,
//     RMSNorm_key_norm, Decoder_module/RMSNorm_final_norm -> norm; their gains are
//     taken as applied: transform gain_as_applied); constants with other
//     names are not weights of the decoder and are left alone. A constant whose buffer is
//     shared by tensors of several roles maps to each of them;
//   * a map file, schema "lumen.litert-map/v1" (JSON):
//       { "schema": "lumen.litert-map/v1",
//         "package_tensor_table_sha256": "<hex>",      // refuses a map written for another package
//         "fixed_int4": {"scale": 0.0625, "storage": "offset_binary"},  // optional: INT4
//                                                      // constants without quantization parameters
//         "name_rules": true,                          // optional: start from the name rules
//         "entries": [ {"constant": 12 | "name": "...", "layer": 3, "role": "self_attn.q_proj",
//                       "transform": "split_qkv" | "gain_plus_1" | "gain_minus_1" | "gain_as_applied"}, ... ] }
//     Only listed constants are used (plus the name rules' when "name_rules" is true; an entry
//     for a (layer, role) the name rules also give is an error, as any duplicate).
//
// The tensor table hash is SHA-256 over one line per constant: "INDEX\tNAME\tTYPE\tD0,D1,...\n".
// Duplicate (layer, role), unknown roles, constants out of range: one lumen::Error line naming
// the file and the constant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/litertlm.h"
#include "formats/tflite.h"
#include "spec/model_spec.h"

namespace lumen::spec {

struct PackageConstant {
  size_t index = 0;
  std::string name;  // the first tensor that uses the buffer
  std::vector<std::string> names;  // every distinct tensor name that uses it (buffers are shared
                                   // between subgraphs, and between equal constants)
  formats::TfliteType type = formats::TfliteType::FLOAT32;
  std::vector<int32_t> shape;
  std::optional<formats::TfliteQuantization> quantization;
  std::string_view bytes;  // into the package's mapping
  // Blockwise quantization (TFLite details type 2): the scale tensor, [rows, cols / block].
  struct BlockScales {
    formats::TfliteType type = formats::TfliteType::FLOAT16;
    std::vector<int32_t> shape;
    std::string_view bytes;
    int32_t block_size = 0;
    bool has_zero_points = false;
  };
  std::optional<BlockScales> block;
  size_t section = 0;      // the package section it lives in
  std::string shape_text() const;
  std::string describe() const;  // "constant 12 'name' (INT4 [64, 64])"
};

struct PackageConstants {
  std::string package;  // path, for messages
  std::vector<PackageConstant> constants;
  std::string table_sha256;
};

// Every constant of every TFLiteModel section (external buffers resolved). Throws on a section
// that cannot be read.
PackageConstants collect_package_constants(const formats::LitertlmFile& package);

// GainAsApplied: the constant holds a norm gain as the graph multiplies by it; when the spec's
// norms apply (1 + w) (Gemma 2/3 checkpoints store w) the binder subtracts 1, else nothing.
// litert-torch stores Gemma 3's gains as applied (the values of llama.cpp's GGUF, 1 + w).
enum class MapTransform { None, SplitQkv, GainPlusOne, GainMinusOne, GainAsApplied };
const char* transform_name(MapTransform t);

struct MapEntry {
  size_t constant = 0;
  int layer = -1;  // -1: not a layer tensor
  std::string role;
  MapTransform transform = MapTransform::None;
};

struct FixedInt4 {
  float scale = 0.0625f;
  bool offset_binary = true;  // nibble - 8; false: two's complement nibble
};

struct LitertMap {
  std::string kind;  // "name-rules" or "file"
  std::string path;  // the map file (kind "file")
  std::string sha256;  // of the map file's bytes
  std::vector<MapEntry> entries;
  std::optional<FixedInt4> fixed_int4;
};

// The role a recognised constant name stands for (layer -1 for global tensors).
struct NamedRole {
  int layer = -1;
  std::string role;
  MapTransform transform = MapTransform::None;
};
std::optional<NamedRole> role_from_name(std::string_view name);

// The (layer, role) of one of the model's own tensor names (expected_tensors):
// "layers.3.self_attn.q_proj.weight" → 3, "self_attn.q_proj"; "embed_tokens.weight" → -1, "embed_tokens".
NamedRole role_of_tensor_name(const std::string& name);

// "layer 3 self_attn.q_proj", or the role alone for a tensor outside the layers.
std::string layer_role_text(int layer, const std::string& role);

// Roles a layer / the model may carry (checkpoint names), plus the fused "self_attn.qkv_proj".
bool is_layer_role(std::string_view role);
bool is_global_role(std::string_view role);

LitertMap map_by_names(const PackageConstants& constants);
LitertMap load_map_file(const std::string& path, const PackageConstants& constants);

// The checkpoint tensor name (without the "model." prefix) of (layer, role).
std::string checkpoint_name(int layer, const std::string& role);

}  // namespace lumen::spec
