#include "quant/quant_mix.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>
#include <regex>

#include "base/error.h"
#include "formats/gguf.h"
#include "quant/ggml_blocks.h"

namespace lumen::quant {

namespace {

using formats::GgmlType;

struct FileTypeName {
  FileType type;
  const char* name;
  GgmlType base;
};

constexpr FileTypeName kFileTypes[] = {
    {FileType::Q8_0, "Q8_0", GgmlType::Q8_0},       {FileType::Q6_K, "Q6_K", GgmlType::Q6_K},
    {FileType::Q5_K_M, "Q5_K_M", GgmlType::Q5_K},   {FileType::Q5_K_S, "Q5_K_S", GgmlType::Q5_K},
    {FileType::Q4_K_M, "Q4_K_M", GgmlType::Q4_K},   {FileType::Q4_K_S, "Q4_K_S", GgmlType::Q4_K},
    {FileType::Q5_1, "Q5_1", GgmlType::Q5_1},       {FileType::Q5_0, "Q5_0", GgmlType::Q5_0},
    {FileType::Q4_1, "Q4_1", GgmlType::Q4_1},       {FileType::Q4_0, "Q4_0", GgmlType::Q4_0},
    {FileType::IQ4_XS, "IQ4_XS", GgmlType::IQ4_XS}, {FileType::IQ4_NL, "IQ4_NL", GgmlType::IQ4_NL},
    {FileType::BF16, "BF16", GgmlType::BF16},       {FileType::F16, "F16", GgmlType::F16},
    {FileType::F32, "F32", GgmlType::F32},
};

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int64_t block_size(int type) {
  const auto traits = formats::ggml_type_traits(uint32_t(type));
  return traits ? traits->block_size : 1;
}

bool is_quantized(int type) {
  return type != int(GgmlType::F32) && type != int(GgmlType::F16) && type != int(GgmlType::BF16) &&
         type != int(GgmlType::F64) && type != int(GgmlType::I8) && type != int(GgmlType::I16) &&
         type != int(GgmlType::I32) && type != int(GgmlType::I64);
}

enum class Category { TokenEmbd, AttnQ, AttnV, AttnK, AttnQkv, AttnKvB, AttnOutput, FfnUp, FfnGate, FfnDown, Output, Other };

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

Category category_of(const std::string& name) {
  if (name == "output.weight") return Category::Output;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::TokenEmbd;
  if (contains(name, "attn_qkv.weight")) return Category::AttnQkv;
  if (contains(name, "attn_kv_b.weight")) return Category::AttnKvB;
  if (contains(name, "attn_v.weight")) return Category::AttnV;
  if (contains(name, "attn_k.weight")) return Category::AttnK;
  if (contains(name, "attn_q.weight")) return Category::AttnQ;
  if (contains(name, "attn_output.weight")) return Category::AttnOutput;
  if (contains(name, "ffn_up")) return Category::FfnUp;
  if (contains(name, "ffn_gate")) return Category::FfnGate;
  if (contains(name, "ffn_down")) return Category::FfnDown;
  return Category::Other;
}

bool is_attn_v_like(Category c) { return c == Category::AttnV || c == Category::AttnQkv || c == Category::AttnKvB; }

// llama.cpp's choice of layers that get more bits in the _M mixes.
bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

int block_number(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

struct MixState {
  const MixOptions& o;
  bool tied = true;
  int n_attention_wv = 0, i_attention_wv = 0, i_ffn_down = 0;
};

int mix_type(MixState& s, const MixTensor& t, Category cat, int type) {
  const FileType ft = s.o.file_type;
  auto is = [&](std::initializer_list<FileType> l) { return std::find(l.begin(), l.end(), ft) != l.end(); };
  if (cat == Category::Output || (s.tied && cat == Category::TokenEmbd)) {
    if (t.ne[0] % block_size(type) != 0) return int(GgmlType::Q8_0);
    return type != int(GgmlType::Q8_0) ? int(GgmlType::Q6_K) : type;
  }
  if (cat == Category::TokenEmbd) return type;
  if (is_attn_v_like(cat)) {
    if (is({FileType::IQ4_NL, FileType::IQ4_XS}) && s.o.n_gqa >= 4) type = int(GgmlType::Q5_K);
    else if (is({FileType::Q4_K_M, FileType::Q5_K_M}) && use_more_bits(s.i_attention_wv, s.n_attention_wv))
      type = int(GgmlType::Q6_K);
    else if (ft == FileType::Q4_K_S && s.i_attention_wv < 4) type = int(GgmlType::Q5_K);
    if (s.o.n_expert == 8) type = int(GgmlType::Q8_0);
    ++s.i_attention_wv;
    return type;
  }
  if (cat == Category::FfnDown) {
    const int i = s.o.n_expert > 1 ? block_number(t.name) : s.i_ffn_down, n = s.o.n_layers;
    if (s.o.n_expert > 1 && (i < 0 || i >= n))
      throw Error("tensor '" + t.name + "': no block number in 0.." + std::to_string(n - 1) + " in its name");
    if (ft == FileType::Q4_K_M) {
      if (use_more_bits(i, n)) type = int(GgmlType::Q6_K);
    } else if (i < n / 8 && is({FileType::IQ4_NL, FileType::IQ4_XS}) && !s.o.has_imatrix) {
      type = int(GgmlType::Q5_K);
    } else if (ft == FileType::Q5_K_M && use_more_bits(i, n)) {
      type = int(GgmlType::Q6_K);
    } else if (ft == FileType::Q4_K_S && i < n / 8) {
      type = int(GgmlType::Q5_K);
    } else if (is({FileType::Q4_0, FileType::Q5_0}) && s.o.has_imatrix && i < n / 8) {
      type = ft == FileType::Q4_0 ? int(GgmlType::Q4_1) : int(GgmlType::Q5_1);
    }
    ++s.i_ffn_down;
    return type;
  }
  if (cat == Category::AttnK && s.o.n_expert == 8) return int(GgmlType::Q8_0);
  if (cat == Category::AttnOutput && s.o.n_expert == 8 &&
      is({FileType::IQ4_NL, FileType::Q4_K_S, FileType::Q4_K_M, FileType::IQ4_XS}))
    return int(GgmlType::Q5_K);
  if (cat == Category::AttnQkv) {
    if (ft == FileType::Q4_K_M) return int(GgmlType::Q5_K);
    if (ft == FileType::Q5_K_M) return int(GgmlType::Q6_K);
  }
  return type;
}

int fallback(const MixTensor& t, int type) {
  const int64_t cols = t.ne[0];
  if (cols % block_size(type) == 0) return type;
  switch (GgmlType(type)) {
    case GgmlType::IQ4_XS: type = int(GgmlType::IQ4_NL); break;
    case GgmlType::Q2_K: case GgmlType::Q3_K: type = int(GgmlType::Q4_0); break;
    case GgmlType::Q4_K: type = int(GgmlType::Q5_0); break;
    case GgmlType::Q5_K: type = int(GgmlType::Q5_1); break;
    case GgmlType::Q6_K: type = int(GgmlType::Q8_0); break;
    default: break;
  }
  if (cols % block_size(type) != 0) type = int(GgmlType::F16);
  return type;
}

}  // namespace

FileType file_type_from_name(const std::string& name, const std::string& what) {
  std::string u = upper(name);
  if (u == "Q4_K") u = "Q4_K_M";
  if (u == "Q5_K") u = "Q5_K_M";
  for (const auto& f : kFileTypes)
    if (u == f.name) return f.type;
  throw Error(what + ": unknown quantization type " + in_quotes(name) + " (" + file_type_names() + ")");
}

const char* file_type_name(FileType type) {
  for (const auto& f : kFileTypes)
    if (f.type == type) return f.name;
  return "?";
}

int file_type_base_ggml_type(FileType type) {
  for (const auto& f : kFileTypes)
    if (f.type == type) return int(f.base);
  throw Error("unknown file type " + std::to_string(uint32_t(type)));
}

std::string file_type_names() {
  std::string out;
  for (const auto& f : kFileTypes) out += std::string(out.empty() ? "" : ", ") + f.name;
  return out;
}

int ggml_type_from_name(const std::string& name) {
  const std::string u = upper(name);
  for (uint32_t id = 0; id < 64; ++id) {
    const auto traits = formats::ggml_type_traits(id);
    if (traits && u == traits->name) return int(id);
  }
  return -1;
}

TensorTypeOverride parse_tensor_type_override(const std::string& item) {
  const size_t eq = item.find('=');
  if (eq == std::string::npos)
    throw Error("--tensor-type " + in_quotes(item) + ": expected NAME=TYPE (e.g. attn_v=q8_0)");
  if (eq == 0) throw Error("--tensor-type " + in_quotes(item) + ": missing tensor name");
  if (eq + 1 == item.size()) throw Error("--tensor-type " + in_quotes(item) + ": missing type");
  TensorTypeOverride o;
  o.pattern = lower(item.substr(0, eq));
  o.type = ggml_type_from_name(item.substr(eq + 1));
  if (o.type < 0)
    throw Error("--tensor-type " + in_quotes(item) + ": unknown ggml type " + in_quotes(item.substr(eq + 1)));
  try {
    std::regex check(o.pattern);
  } catch (const std::regex_error&) {
    throw Error("--tensor-type " + in_quotes(item) + ": the name is not a valid regular expression");
  }
  return o;
}

bool tensor_is_quantizable(const MixTensor& t) {
  int dims = int(t.ne.size());
  while (dims > 1 && t.ne[size_t(dims - 1)] == 1) --dims;  // ggml_n_dims ignores trailing 1s
  if (dims < 2) return false;
  const std::string& n = t.name;
  if (n.size() < 6 || n.compare(n.size() - 6, 6, "weight") != 0) return false;
  for (const char* skip : {"_norm.weight", "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj",
                           "position_embd", "token_types", "ssm_conv1d", "attn_rel_b.weight"})
    if (contains(n, skip)) return false;
  return true;
}

std::vector<size_t> llama_tensor_order(const std::vector<std::string>& names) {
  std::vector<size_t> order(names.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = block_number(names[a]), lb = block_number(names[b]);
    if (la != lb) return la < lb;
    return names[a] < names[b];
  });
  return order;
}

std::vector<int> choose_tensor_types(const std::vector<MixTensor>& tensors, const MixOptions& options) {
  MixState state{options};
  std::vector<std::string> names;
  for (const auto& t : tensors) {
    names.push_back(t.name);
    const Category c = category_of(t.name);
    if (is_attn_v_like(c)) ++state.n_attention_wv;
    if (c == Category::Output) state.tied = false;
  }
  std::vector<std::pair<std::regex, int>> patterns;
  for (const auto& o : options.overrides) patterns.emplace_back(std::regex(o.pattern), o.type);

  const int base = file_type_base_ggml_type(options.file_type);
  std::vector<int> result(tensors.size());
  // llama.cpp walks the tensors in its file order; the layer counters depend on it.
  for (size_t i : llama_tensor_order(names)) {
    const MixTensor& t = tensors[i];
    if (!tensor_is_quantizable(t)) {
      result[i] = t.type;
      continue;
    }
    int type = base;
    if (is_quantized(base)) {
      bool manual = false;
      for (const auto& [re, ty] : patterns)
        if (std::regex_search(t.name, re)) {
          type = ty;
          manual = true;
          break;
        }
      if (!manual) type = mix_type(state, t, category_of(t.name), type);
      type = fallback(t, type);
    }
    if (t.ne[0] % block_size(type) != 0)
      throw Error("tensor '" + t.name + "' has rows of " + std::to_string(t.ne[0]) + " elements: no type fits");
    result[i] = type;
  }
  return result;
}

}  // namespace lumen::quant
