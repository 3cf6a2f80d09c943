// The per-tensor type mixes of llama.cpp's file types (llama-quantize's Q4_K_M, Q5_K_M, ...):
// which ggml type each tensor of a GGUF model gets, decided from its GGUF name, its shape and
// its place among the model's layers, exactly as llama.cpp decides (src/llama-quant.cpp):
//   - 1-D tensors, norms and other tensors llama.cpp never quantizes keep their type;
//   - the embedding of a tied model (and an output matrix) goes to Q6_K, or Q8_0 when its
//     rows are not a whole number of the file type's blocks (Q8_0 files keep Q8_0);
//   - attn_v and ffn_down are raised in the _M mixes (Q6_K on the first and last eighth of
//     the layers and every third one between), in Q4_K_S (Q5_K on the first few), in
//     IQ4_XS (Q5_K for attn_v when 4+ query heads share a KV head; ffn_down's first
//     eighth without an imatrix); Q4_0/Q5_0 with an imatrix put the first eighth of
//     ffn_down in Q4_1/Q5_1;
//   - with experts (n_expert > 1), ffn_down's layer is the block number in its name (the
//     dense ffn_down and ffn_down_exps of a block share it); with exactly 8 experts attn_v
//     and attn_k go to Q8_0, and attn_output to Q5_K in the 4-bit K and IQ4 mixes;
//   - a type whose block does not divide a tensor's rows falls back (Q4_K -> Q5_0,
//     Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL, then F16);
//   - `--tensor-type PATTERN=TYPE` overrides (a regex searched in the name; first match
//     wins) replace the mix's choice for the tensors they match (then the fallback).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lumen::quant {

// llama.cpp's file types (the numbers of llama_ftype, stored in general.file_type).
enum class FileType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q8_0 = 7,
  Q5_0 = 8,
  Q5_1 = 9,
  Q4_K_S = 14,
  Q4_K_M = 15,
  Q5_K_S = 16,
  Q5_K_M = 17,
  Q6_K = 18,
  IQ4_NL = 25,
  IQ4_XS = 30,
  BF16 = 32,
};

// "Q4_K_M" (case-insensitive; also "Q4_K" = Q4_K_M and "Q5_K" = Q5_K_M, as llama-quantize
// accepts). Throws lumen::Error naming `what` and listing the names for anything else.
FileType file_type_from_name(const std::string& name, const std::string& what);
const char* file_type_name(FileType type);
// The type most tensors of the file type get (Q4_K for Q4_K_M).
int file_type_base_ggml_type(FileType type);
// Every name file_type_from_name accepts, for help texts.
std::string file_type_names();

// A ggml type by name ("q8_0", case-insensitive), as --tensor-type takes it; -1 if unknown.
int ggml_type_from_name(const std::string& name);

struct MixTensor {
  std::string name;           // GGUF name, e.g. "blk.3.ffn_down.weight"
  int type = 0;               // its type in the source (ggml id)
  std::vector<int64_t> ne;    // dims, fastest-varying first
};

struct TensorTypeOverride {
  std::string pattern;  // a regex searched in the tensor name
  int type = 0;         // ggml id
};

struct MixOptions {
  FileType file_type = FileType::Q4_K_M;
  bool has_imatrix = false;
  int n_layers = 0;  // block count
  int n_gqa = 1;     // query heads per KV head (layer 0), as llama.cpp's hparams.n_gqa()
  int n_expert = 0;  // experts per MoE block (0: none); with more than one, a tensor's layer
                     // comes from its name, not from its place in the file (as llama.cpp)
  std::vector<TensorTypeOverride> overrides;
};

// Parses "PATTERN=TYPE" (llama-quantize's --tensor-type; the pattern is lowercased).
// Throws lumen::Error naming the flag value on a malformed item or an unknown type.
TensorTypeOverride parse_tensor_type_override(const std::string& item);

// True for the tensors llama.cpp quantizes (2-D or more, "*weight", not a norm, ...).
bool tensor_is_quantizable(const MixTensor& tensor);

// The ggml type of each tensor, in the order given. Throws lumen::Error when a tensor's
// rows cannot be stored in any fallback type.
std::vector<int> choose_tensor_types(const std::vector<MixTensor>& tensors, const MixOptions& options);

// llama.cpp's tensor order for a quantized file: by block number (tensors outside blocks
// first), then by name. Returns indices into `names`.
std::vector<size_t> llama_tensor_order(const std::vector<std::string>& names);

}  // namespace lumen::quant
