// Private helpers shared by the spec builders: typed, path-aware reads of JSON objects whose
// failures are one-line lumen::Errors naming the source file and the dotted field.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "spec/model_spec.h"

namespace lumen::spec::detail {

using nlohmann::json;

// Throws lumen::Error("SOURCE: MESSAGE") with any line breaks flattened.
[[noreturn]] void fail(const std::string& source, const std::string& message);

// Layers a spec may have: far more than any real model (Gemma 3 27B has 62), few enough that a
// file claiming 2^30 cannot make a builder allocate gigabytes of layer specs.
inline constexpr int64_t kMaxLayers = 1024;
// Throws naming `field` unless 1 <= n <= kMaxLayers; called before anything per layer is built.
void check_layer_count(const std::string& source, const std::string& field, int64_t n);

// Line breaks and other control characters replaced by spaces.
std::string one_line(std::string text);

// "`text`" and "'text'", built by appending (GCC 12 warns falsely, -Wrestrict, about
// "literal" + std::string temporaries at -O2).
std::string tick(std::string_view text);
std::string squote(std::string_view text);

// `value` as compact JSON, shortened for messages ("'gelu'" style for strings).
std::string show(const json& value);

// "integer", "number", "string", "boolean", "null", "array", "object".
std::string type_name(const json& value);

// One JSON object being read. `path` is its dotted location ("" for the root,
// "text_config", "runtime.manifestInference.rope"); field names in errors are path.key.
class ObjectReader {
 public:
  ObjectReader(const json& object, std::string path, std::string source);

  const std::string& source() const { return source_; }
  const std::string& path() const { return path_; }
  const json& raw() const { return *object_; }

  std::string field(std::string_view key) const;
  bool has(std::string_view key) const;  // present, possibly null
  bool has_value(std::string_view key) const;  // present and not null
  const json* find(std::string_view key) const;

  // Absent → fallback; null or wrong type → error naming the field and the expected type.
  int integer(std::string_view key, int fallback) const;
  double number(std::string_view key, double fallback) const;
  bool boolean(std::string_view key, bool fallback) const;
  std::string string(std::string_view key, const std::string& fallback) const;

  // Absent or null → nullopt; wrong type → error.
  std::optional<int> optional_integer(std::string_view key) const;
  std::optional<double> optional_number(std::string_view key) const;
  std::optional<bool> optional_boolean(std::string_view key) const;
  std::optional<std::string> optional_string(std::string_view key) const;
  std::optional<std::vector<int>> optional_int_list(std::string_view key) const;
  std::optional<std::vector<std::string>> optional_string_list(std::string_view key) const;
  std::optional<ObjectReader> optional_object(std::string_view key) const;

  // Absent → error "missing"; null allowed only where the optional_* result is used.
  int required_integer(std::string_view key) const;
  double required_number(std::string_view key) const;
  bool required_boolean(std::string_view key) const;
  std::string required_string(std::string_view key) const;
  ObjectReader required_object(std::string_view key) const;
  void require_present(std::string_view key) const;  // the key must exist (null allowed)

  // Error naming the first key not in `allowed` (the engine must not ignore what it does
  // not understand).
  void allow_only(const std::set<std::string, std::less<>>& allowed) const;

  [[noreturn]] void fail_field(std::string_view key, const std::string& message) const;
  [[noreturn]] void fail_type(std::string_view key, const std::string& expected) const;

 private:
  const json* object_;
  std::string path_;
  std::string source_;
};

// Integer from a JSON value: must be an integral number fitting in int.
bool as_int(const json& value, int& out);

// Layer type string → kind; false for anything else.
bool parse_layer_type(const std::string& name, AttentionKind& kind);
// The kinds of a `layer_types`-style list read from `reader`'s field `key`; an unknown
// entry fails naming the field and index.
std::vector<AttentionKind> parse_layer_types(const ObjectReader& reader, std::string_view key,
                                             const std::vector<std::string>& types);
const char* kind_name(AttentionKind kind);        // "sliding" | "full"
const char* layer_type_name(AttentionKind kind);  // "sliding_attention" | "full_attention"

// "default" when the rope rotates all dims with the standard exponent, else "proportional".
std::string rope_type_for(double partial_factor, int freq_base_dim, int head_dim);

// Checks every layer of a built spec (positive sizes, GQA divisibility, windows, rope
// ranges); errors are prefixed with spec.source. Token ids outside the vocabulary become
// notes (and unreachable stop ids are dropped), as transformers only warns about them.
void validate_spec(ModelSpec& spec);

// Marks the last `num_shared` layers KV-shared, as transformers' Gemma4TextConfig does: each
// reads the keys and values of the last earlier non-shared layer of its attention kind and
// drops its k-norm; with `double_wide_mlp` its MLP is twice as wide. `field` names the count in
// errors (a count past the layers, a shared kind no earlier layer has).
void assign_kv_sharing(ModelSpec& spec, int num_shared, bool double_wide_mlp, const std::string& field);

// One Gemma 3 layer (GGUF and HF config alike): q/k norms with gains, no v norm, no layer
// scalar, full RoPE; sliding layers use the local theta and no scaling, full layers the
// global theta and `global_scaling`.
LayerSpec gemma3_layer(AttentionKind kind, int num_q_heads, int num_kv_heads, int head_dim, int window, int ffn_dim,
                       double local_theta, double global_theta, double global_scaling);

}  // namespace lumen::spec::detail
