// tokenizer.json (Hugging Face `tokenizers`) -> BpeDefinition. Only what Gemma's files use is
// accepted (a BPE model; Replace/Prepend normalizers; Split pre-tokenizers with a string
// pattern; Replace/ByteFallback/Fuse/Strip decoders); anything else is refused by name
// rather than silently tokenized differently.
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json.h"
#include "tokenizer/bpe_tokenizer.h"

namespace lumen::tokenizer {
namespace {

using nlohmann::json;

class JsonReader {
 public:
  explicit JsonReader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& message) const {
    throw Error(source_ + ": " + field + ": " + message);
  }
  const json& member(const json& object, const std::string& key, const std::string& field) const {
    if (!object.is_object()) fail(field, "expected an object");
    auto it = object.find(key);
    if (it == object.end()) fail(field + "." + key, "missing");
    return *it;
  }
  std::string string(const json& value, const std::string& field) const {
    if (!value.is_string()) fail(field, "expected a string, got " + std::string(value.type_name()));
    return value.get<std::string>();
  }
  bool boolean(const json& object, const std::string& key, const std::string& field, bool fallback) const {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) fail(field + "." + key, "expected true or false");
    return it->get<bool>();
  }
  // tokenizers' pattern: {"String": "..."}; a {"Regex": ...} pattern is not supported.
  std::string string_pattern(const json& step, const std::string& field) const {
    const json& pattern = member(step, "pattern", field);
    if (pattern.is_object() && pattern.contains("String")) return string(pattern["String"], field + ".pattern.String");
    fail(field + ".pattern", "only {\"String\": ...} patterns are supported");
  }
  std::string type_of(const json& step, const std::string& field) const {
    return string(member(step, "type", field), field + ".type");
  }

 private:
  std::string source_;
};

void read_normalizer(const JsonReader& r, const json& step, const std::string& field, std::vector<NormalizeStep>& out) {
  if (step.is_null()) return;
  const std::string type = r.type_of(step, field);
  if (type == "Sequence") {
    const json& list = r.member(step, "normalizers", field);
    if (!list.is_array()) r.fail(field + ".normalizers", "expected a list");
    for (size_t i = 0; i < list.size(); ++i) read_normalizer(r, list[i], field + ".normalizers[" + std::to_string(i) + "]", out);
  } else if (type == "Replace") {
    out.push_back({NormalizeStep::Kind::Replace, r.string_pattern(step, field), r.string(r.member(step, "content", field), field + ".content")});
  } else if (type == "Prepend") {
    out.push_back({NormalizeStep::Kind::Prepend, "", r.string(r.member(step, "prepend", field), field + ".prepend")});
  } else {
    r.fail(field + ".type", "normalizer '" + type + "' is not supported");
  }
}

void read_pre_tokenizer(const JsonReader& r, const json& step, const std::string& field, std::vector<SplitStep>& out) {
  if (step.is_null()) return;
  const std::string type = r.type_of(step, field);
  if (type == "Sequence") {
    const json& list = r.member(step, "pretokenizers", field);
    if (!list.is_array()) r.fail(field + ".pretokenizers", "expected a list");
    for (size_t i = 0; i < list.size(); ++i)
      read_pre_tokenizer(r, list[i], field + ".pretokenizers[" + std::to_string(i) + "]", out);
  } else if (type == "Split") {
    SplitStep split;
    split.pattern = r.string_pattern(step, field);
    if (split.pattern.empty()) r.fail(field + ".pattern", "is empty");
    if (r.boolean(step, "invert", field, false)) r.fail(field + ".invert", "inverted splits are not supported");
    const std::string behavior = r.string(r.member(step, "behavior", field), field + ".behavior");
    using B = SplitStep::Behavior;
    if (behavior == "Removed") split.behavior = B::Removed;
    else if (behavior == "Isolated") split.behavior = B::Isolated;
    else if (behavior == "MergedWithPrevious") split.behavior = B::MergedWithPrevious;
    else if (behavior == "MergedWithNext") split.behavior = B::MergedWithNext;
    else if (behavior == "Contiguous") split.behavior = B::Contiguous;
    else r.fail(field + ".behavior", "unknown behavior '" + behavior + "'");
    out.push_back(split);
  } else {
    r.fail(field + ".type", "pre-tokenizer '" + type + "' is not supported");
  }
}

void read_decoder(const JsonReader& r, const json& step, const std::string& field, std::vector<DecodeStep>& out) {
  const std::string type = r.type_of(step, field);
  DecodeStep d;
  if (type == "Sequence") {
    const json& list = r.member(step, "decoders", field);
    if (!list.is_array()) r.fail(field + ".decoders", "expected a list");
    for (size_t i = 0; i < list.size(); ++i) read_decoder(r, list[i], field + ".decoders[" + std::to_string(i) + "]", out);
    return;
  } else if (type == "Replace") {
    d.kind = DecodeStep::Kind::Replace;
    d.pattern = r.string_pattern(step, field);
    d.content = r.string(r.member(step, "content", field), field + ".content");
  } else if (type == "ByteFallback") {
    d.kind = DecodeStep::Kind::ByteFallback;
  } else if (type == "Fuse") {
    d.kind = DecodeStep::Kind::Fuse;
  } else if (type == "Strip") {
    d.kind = DecodeStep::Kind::Strip;
    d.content = r.string(r.member(step, "content", field), field + ".content");
    const json& start = r.member(step, "start", field);
    const json& stop = r.member(step, "stop", field);
    if (!start.is_number_unsigned() || !stop.is_number_unsigned() || start.get<uint64_t>() > (1u << 20) ||
        stop.get<uint64_t>() > (1u << 20))
      r.fail(field, "start and stop must be counts");
    d.strip_start = start.get<int>();
    d.strip_stop = stop.get<int>();
  } else {
    r.fail(field + ".type", "decoder '" + type + "' is not supported");
  }
  out.push_back(d);
}


// Builds the document like json::parse, except that model.vocab (262144 keys) and model.merges
// (half a million pairs) go straight into flat lists: a std::map DOM of the vocabulary was most
// of the load time. The document keeps an empty {} / [] in their place.
class TokenizerJsonSax {
 public:
  explicit TokenizerJsonSax(json& root) : dom_(root, true) {}

  bool vocab_seen = false, merges_seen = false;
  std::vector<std::pair<std::string, json>> vocab;  // key, scalar value (a nested value: json::array())
  std::vector<json> merges;                         // "a b", ["a", "b"], or an invalid marker (null)

  bool null() { return capturing() ? scalar(json(nullptr)) : dom_.null(); }
  bool boolean(bool v) { return capturing() ? scalar(json(v)) : dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return capturing() ? scalar(json(v)) : dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return capturing() ? scalar(json(v)) : dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const std::string& text) {
    return capturing() ? scalar(json(v)) : dom_.number_float(v, text);
  }
  bool string(std::string& v) { return capturing() ? scalar(json(std::move(v))) : dom_.string(v); }
  bool binary(json::binary_t& v) { return capturing() ? scalar(json(nullptr)) : dom_.binary(v); }

  bool key(std::string& k) {
    if (mode_ == Mode::Vocab && depth_ == 0) vocab_key_ = k;
    if (capturing()) return true;
    pending_key_ = k;
    return dom_.key(k);
  }
  bool start_object(std::size_t n) {
    enter();
    if (capturing()) return open_nested();
    if (at_model() && pending_key_ == "vocab") {
      mode_ = Mode::Vocab;
      vocab_seen = true;
      depth_ = 0;
      return dom_.start_object(0) && dom_.end_object();
    }
    path_.push_back(std::exchange(pending_key_, {}));
    return dom_.start_object(n);
  }
  bool end_object() {
    --nesting_;
    if (capturing()) return close_nested();
    path_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    enter();
    if (capturing()) {
      if (mode_ == Mode::Merges && depth_ == 0) {
        ++depth_;
        pair_ = json::array();
        return true;
      }
      return open_nested();
    }
    if (at_model() && pending_key_ == "merges") {
      mode_ = Mode::Merges;
      merges_seen = true;
      depth_ = 0;
      return dom_.start_array(0) && dom_.end_array();
    }
    path_.push_back(std::exchange(pending_key_, {}));
    return dom_.start_array(n);
  }
  bool end_array() {
    --nesting_;
    if (capturing()) {
      if (mode_ == Mode::Merges && depth_ == 1) {
        --depth_;
        merges.push_back(std::move(pair_));
        return true;
      }
      return close_nested();
    }
    path_.pop_back();
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& ex) {
    return dom_.parse_error(position, token, ex);
  }

 private:
  enum class Mode { None, Vocab, Merges };
  // Nesting is bounded like every JSON document Lumen reads (base/json.h): the normalizer,
  // pre-tokenizer and decoder readers recurse into "Sequence" steps.
  void enter() {
    if (++nesting_ > kMaxJsonDepth)
      throw json::parse_error::create(101, 0, "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels",
                                      nullptr);
  }
  int nesting_ = 0;
  bool capturing() const { return mode_ != Mode::None; }
  bool at_model() const { return path_.size() == 2 && path_[1] == "model"; }

  bool scalar(json value) {
    if (depth_ == 0) {
      if (mode_ == Mode::Vocab) vocab.emplace_back(vocab_key_, std::move(value));
      else merges.push_back(std::move(value));
    } else if (mode_ == Mode::Merges && depth_ == 1 && pair_.is_array()) {
      pair_.push_back(std::move(value));
    }
    return true;
  }
  // A container inside a vocabulary value or a merge: the entry is invalid; skip its content.
  bool open_nested() {
    if (depth_ == 0 && mode_ == Mode::Vocab) vocab.emplace_back(vocab_key_, json::array());
    if (depth_ == 0 && mode_ == Mode::Merges) merges.push_back(json());
    if (depth_ == 1 && mode_ == Mode::Merges) pair_ = json();
    ++depth_;
    return true;
  }
  bool close_nested() {
    if (depth_ == 0) {
      mode_ = Mode::None;  // the end of model.vocab or model.merges itself
      return true;
    }
    --depth_;
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<std::string> path_;  // keys of the open containers ("" for the root and array elements)
  std::string pending_key_;
  Mode mode_ = Mode::None;
  int depth_ = 0;  // nesting inside the captured value
  std::string vocab_key_;
  json pair_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the tokenizer file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_hf_tokenizer(std::move(buffer).str(), path);
}

std::unique_ptr<Tokenizer> parse_hf_tokenizer(std::string_view text, const std::string& path) {
  json root;
  TokenizerJsonSax sax(root);
  try {
    json::sax_parse(text, &sax);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  JsonReader r(path);
  if (!root.is_object()) r.fail("(top level)", "expected a JSON object (a tokenizers tokenizer.json)");

  BpeDefinition def;
  def.source = path;
  def.kind = "hf-bpe";
  def.merges_field = "model.merges";
  const json& model = r.member(root, "model", "(top level)");
  const std::string type = model.contains("type") ? r.string(model["type"], "model.type") : "BPE";
  if (type != "BPE") r.fail("model.type", "'" + type + "' is not supported (only BPE)");
  if (model.contains("dropout") && !model["dropout"].is_null() && !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0))
    r.fail("model.dropout", "BPE dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model[key].is_null() && !(model[key].is_string() && model[key].get<std::string>().empty()))
      r.fail(std::string("model.") + key, "is not supported");
  def.byte_fallback = r.boolean(model, "byte_fallback", "model", false);
  def.fuse_unk = r.boolean(model, "fuse_unk", "model", false);
  def.ignore_merges = r.boolean(model, "ignore_merges", "model", false);
  if (model.contains("unk_token") && !model["unk_token"].is_null()) def.unk_token = r.string(model["unk_token"], "model.unk_token");

  const json& vocab_value = r.member(model, "vocab", "model");
  if (!sax.vocab_seen || !vocab_value.is_object()) r.fail("model.vocab", "expected an object of token -> id");
  const auto& vocab = sax.vocab;
  std::vector<bool> seen(vocab.size(), false);
  def.vocab.assign(vocab.size(), std::string());
  for (auto& [key, value] : sax.vocab) {
    if (!value.is_number_integer()) r.fail("model.vocab", "the id of " + in_quotes(key) + " is not an integer");
    const int64_t id = value.get<int64_t>();
    if (id < 0 || uint64_t(id) >= vocab.size())
      r.fail("model.vocab", "id " + std::to_string(id) + " of " + in_quotes(key) + " is outside 0.." +
                                std::to_string(vocab.size() - 1) + " (ids must be dense)");
    if (seen[size_t(id)]) r.fail("model.vocab", "id " + std::to_string(id) + " is used twice");
    seen[size_t(id)] = true;
    def.vocab[size_t(id)] = std::move(key);
  }
  sax.vocab = {};

  const json& merges_value = r.member(model, "merges", "model");
  if (!sax.merges_seen || !merges_value.is_array()) r.fail("model.merges", "expected a list");
  const auto& merges = sax.merges;
  def.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    const std::string field = "model.merges[" + std::to_string(i) + "]";
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        r.fail(field, in_quotes(s) + " is not two tokens separated by one space");
      def.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      def.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      r.fail(field, "expected \"a b\" or [\"a\", \"b\"]");
    }
  }

  if (root.contains("added_tokens") && !root["added_tokens"].is_null()) {
    const json& added = root["added_tokens"];
    if (!added.is_array()) r.fail("added_tokens", "expected a list");
    for (size_t i = 0; i < added.size(); ++i) {
      const std::string field = "added_tokens[" + std::to_string(i) + "]";
      const json& a = added[i];
      AddedTokenDef t;
      const json& id = r.member(a, "id", field);
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) r.fail(field + ".id", "expected a token id");
      t.id = id.get<int32_t>();
      t.content = r.string(r.member(a, "content", field), field + ".content");
      if (t.content.empty()) r.fail(field + ".content", "is empty");
      t.special = r.boolean(a, "special", field, false);
      t.normalized = r.boolean(a, "normalized", field, !t.special);
      t.lstrip = r.boolean(a, "lstrip", field, false);
      t.rstrip = r.boolean(a, "rstrip", field, false);
      t.single_word = r.boolean(a, "single_word", field, false);
      def.added.push_back(std::move(t));
    }
  }
  if (root.contains("normalizer")) read_normalizer(r, root["normalizer"], "normalizer", def.normalizer);
  if (root.contains("pre_tokenizer")) read_pre_tokenizer(r, root["pre_tokenizer"], "pre_tokenizer", def.pre_tokenizer);
  if (root.contains("decoder") && !root["decoder"].is_null()) {
    def.has_decoder = true;
    read_decoder(r, root["decoder"], "decoder", def.decoder);
  }
  root = json();
  sax.merges = {};

  // Gemma's names; the post-processor's BOS is not applied (callers add BOS explicitly).
  auto find_id = [&](std::initializer_list<const char*> names) -> int32_t {
    for (const char* name : names) {
      for (const auto& a : def.added)
        if (a.content == name) return a.id;
      for (size_t id = 0; id < def.vocab.size(); ++id)
        if (def.vocab[id] == name) return int32_t(id);
    }
    return -1;
  };
  def.bos_id = find_id({"<bos>", "<s>"});
  def.eos_id = find_id({"<eos>", "</s>"});
  def.pad_id = find_id({"<pad>"});
  return make_bpe_tokenizer(std::move(def));
}

}  // namespace lumen::tokenizer
