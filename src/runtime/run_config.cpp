#include "runtime/run_config.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>

#include "base/error.h"
#include "base/json.h"
#include "tokenizer/tokenizer.h"

namespace lumen::runtime {
namespace {

using nlohmann::json;

const char* kSessionPath = "runtime.manifestInference.session";

// A JSON object at a dotted path; errors are "SOURCE: PATH.KEY: message".
struct Block {
  const json* obj = nullptr;  // null: absent
  std::string source, path;

  std::string field(const std::string& key) const { return path + "." + key; }
  [[noreturn]] void fail(const std::string& key, const std::string& msg) const {
    throw Error(source + ": " + field(key) + ": " + msg);
  }
  const json* find(const std::string& key) const {
    if (!obj) return nullptr;
    auto it = obj->find(key);
    return it == obj->end() || it->is_null() ? nullptr : &*it;
  }
  void allow_only(const std::set<std::string>& keys, const std::string& why) const {
    if (!obj) return;
    for (auto it = obj->begin(); it != obj->end(); ++it)
      if (!keys.count(it.key())) fail(it.key(), "unknown field (" + why + ")");
  }
  Block child(const std::string& key) const {
    const json* v = find(key);
    if (v && !v->is_object()) fail(key, "expected an object, got " + v->dump());
    return Block{v, source, field(key)};
  }
  std::optional<std::string> str(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) fail(key, "expected a string, got " + v->dump());
    return v->get<std::string>();
  }
  std::optional<int> integer(const std::string& key, int lo, int hi) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_number_integer()) fail(key, "expected an integer, got " + v->dump());
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) fail(key, "must be in " + std::to_string(lo) + " .. " + std::to_string(hi) + ", got " + v->dump());
    return int(x);
  }
  std::optional<bool> boolean(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) fail(key, "expected true or false, got " + v->dump());
    return v->get<bool>();
  }
  std::optional<std::vector<int>> int_list(const std::string& key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_array()) fail(key, "expected a list of token ids, got " + v->dump());
    std::vector<int> out;
    for (const auto& x : *v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
        fail(key, "expected a list of token ids, got " + v->dump());
      out.push_back(int(x.get<int64_t>()));
    }
    return out;
  }
};

const json* at_path(const json& root, std::initializer_list<const char*> keys) {
  const json* node = &root;
  for (const char* key : keys) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(key);
    if (it == node->end() || it->is_null()) return nullptr;
    node = &*it;
  }
  return node;
}

std::string in_single_quotes(const std::string& s) { return "'" + printable(s) + "'"; }

// "268435456", "256MiB", "64M", "1GB": bytes (K/M/G are 1024-based with or without "iB").
int64_t parse_bytes_flag(const std::string& flag, const std::string& text) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used == 0 || v < 1)
    throw Error(flag + ": " + in_single_quotes(text) + " is not a positive size in bytes (e.g. 268435456, 256MiB)");
  std::string unit = text.substr(used);
  for (auto& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  int shift = 0;
  if (unit.empty() || unit == "B") shift = 0;
  else if (unit == "K" || unit == "KB" || unit == "KIB") shift = 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB") shift = 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB") shift = 30;
  else throw Error(flag + ": " + in_single_quotes(text) + " has an unknown unit (expected B, KiB, MiB or GiB)");
  if (v > (INT64_MAX >> shift)) throw Error(flag + ": " + text + " is too large");
  return int64_t(v) << shift;
}

int parse_int_flag(const std::string& flag, const std::string& text, int lo, int hi) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size()) throw Error(flag + ": " + in_single_quotes(text) + " is not an integer");
  if (v < lo || v > hi)
    throw Error(flag + ": " + text + " is out of range (" + std::to_string(lo) + " .. " + std::to_string(hi) + ")");
  return int(v);
}

// A positive integer that may exceed int (byte limits).
int64_t positive_count(const Block& b, const std::string& key, int64_t fallback) {
  const json* v = b.find(key);
  if (!v) return fallback;
  if (!v->is_number_integer() || v->get<int64_t>() < 1) b.fail(key, "expected a positive integer, got " + v->dump());
  return v->get<int64_t>();
}

}  // namespace

model::PerLayerInputConfig per_layer_inputs_from_json(const json& block, const std::string& source,
                                                      const std::string& where) {
  if (!block.is_object()) throw Error(source + ": " + where + ": expected an object, got " + block.dump());
  const Block b{&block, source, where};
  const std::string unknown = "Lumen does not know what it means";
  b.allow_only({"materialization", "rowCache", "prefetch", "gpuUpload", "hotCache"}, unknown);
  model::PerLayerInputConfig c;
  if (auto m = b.str("materialization")) {
    if (*m == "cpu_resident") c.resident = true;
    else if (*m != "auto" && *m != "range_backed" && *m != "gpu_resident" && *m != "gpu_split_tables")
      b.fail("materialization", "unknown mode " + in_single_quotes(*m) +
                                    " (expected auto, range_backed, cpu_resident, gpu_resident or gpu_split_tables)");
    // gpu_resident / gpu_split_tables place the table on a GPU: on the CPU it stays mapped in
    // its stored format and rows are gathered per token, which is what range_backed means.
  }
  const Block rows = b.child("rowCache");
  rows.allow_only({"mode", "maxRows", "maxBytes", "decodedDtype"}, unknown);
  if (auto m = rows.str("mode")) {
    if (*m != "off" && *m != "lru") rows.fail("mode", "unknown mode " + in_single_quotes(*m) + " (expected off or lru)");
    c.row_cache = *m == "lru";
  }
  c.row_cache_rows = positive_count(rows, "maxRows", c.row_cache_rows);
  c.row_cache_bytes = positive_count(rows, "maxBytes", c.row_cache_bytes);
  if (auto d = rows.str("decodedDtype")) {
    if (*d == "f32") c.decoded = model::RowDtype::F32;
    else if (*d == "f16") c.decoded = model::RowDtype::F16;
    else if (*d == "bf16") c.decoded = model::RowDtype::BF16;
    else rows.fail("decodedDtype", "unknown dtype " + in_single_quotes(*d) + " (expected f32, f16 or bf16)");
  }
  const Block pre = b.child("prefetch");
  pre.allow_only({"mode", "rowsAhead"}, unknown);
  if (auto m = pre.str("mode")) {
    if (*m != "off" && *m != "next_token")
      pre.fail("mode", "unknown mode " + in_single_quotes(*m) + " (expected off or next_token)");
    c.prefetch = *m == "next_token";
  }
  if (auto n = pre.integer("rowsAhead", 1, 1 << 20)) c.rows_ahead = *n;
  const Block up = b.child("gpuUpload");
  up.allow_only({"mode", "stagingRows"}, unknown);
  if (auto m = up.str("mode"); m && *m != "per_step_slices" && *m != "per_batch_slices")
    up.fail("mode", "unknown mode " + in_single_quotes(*m) + " (expected per_step_slices or per_batch_slices)");
  up.integer("stagingRows", 1, 1 << 20);  // no GPU to stage rows for: checked only
  const Block hot = b.child("hotCache");
  hot.allow_only({"mode", "maxTokens", "maxBytes", "outputDtype"}, unknown);
  if (auto m = hot.str("mode")) {
    if (*m == "tokenizer_scores")
      hot.fail("mode", "'tokenizer_scores' (a GPU table of the tokenizer's most likely tokens) is not supported: "
                       "use prepared_tokens, which keeps the inputs of the tokens actually seen");
    if (*m != "off" && *m != "prepared_tokens")
      hot.fail("mode", "unknown mode " + in_single_quotes(*m) + " (expected off or prepared_tokens)");
    c.hot_cache = *m == "prepared_tokens";
  }
  c.hot_tokens = positive_count(hot, "maxTokens", c.hot_tokens);
  c.hot_bytes = positive_count(hot, "maxBytes", c.hot_bytes);
  if (auto d = hot.str("outputDtype"); d && *d != "f32")
    hot.fail("outputDtype", in_single_quotes(*d) + " is not supported: prepared inputs are f32, as every activation here");
  return c;
}

std::string run_config_to_text(const RunConfig& c) {
  std::ostringstream o;
  o << "KV " << kv::kv_config_to_text(c.kv) << "; prefill chunks of " << c.prefill_chunk;
  if (c.decode_batch) o << "; decode batch " << *c.decode_batch;
  if (!c.stop_tokens.empty()) {
    o << "; stop ids";
    for (size_t i = 0; i < c.stop_tokens.size(); ++i) o << (i ? "," : " ") << c.stop_tokens[i];
  }
  if (c.add_bos) o << "; BOS " << (*c.add_bos ? "added" : "not added");
  o << "; per-layer inputs: " << model::per_layer_input_config_to_text(c.per_layer_inputs);
  return o.str();
}

json run_config_to_json(const RunConfig& c) {
  json j;
  j["kv"] = {{"dtype", kv::kv_elem_name(c.kv.dtype)},
             {"layout", c.kv.layout == kv::KvLayout::Contiguous ? "contiguous" : "paged"},
             {"page_size", c.kv.page_size},
             {"tiering", c.kv.tiering},
             {"hot_window", c.kv.hot_window},
             {"cold_dtype", kv::kv_elem_name(c.kv.cold)},
             {"block_size", c.kv.block_size}};
  j["prefill_chunk"] = c.prefill_chunk;
  j["decode_batch"] = c.decode_batch ? json(*c.decode_batch) : json();
  j["stop_tokens"] = c.stop_tokens;
  j["add_bos"] = c.add_bos ? json(*c.add_bos) : json();
  const auto& p = c.per_layer_inputs;
  j["per_layer_inputs"] = {{"table", p.resident ? "resident" : "mapped"},
                           {"row_cache", p.row_cache ? json({{"rows", p.row_cache_rows}, {"bytes", p.row_cache_bytes},
                                                             {"decoded_dtype", model::row_dtype_name(p.decoded)}})
                                                     : json(nullptr)},
                           {"prefetch_rows_ahead", p.prefetch ? json(p.rows_ahead) : json(nullptr)},
                           {"hot_cache", p.hot_cache ? json({{"tokens", p.hot_tokens}, {"bytes", p.hot_bytes}})
                                                     : json(nullptr)}};
  return j;
}

RunConfig run_config_from_manifest(const json& manifest, const std::string& source) {
  RunConfig c;
  c.manifest = source;
  if (!manifest.is_object()) throw Error(source + ": expected a JSON object (a doppler.execution/v1 manifest)");
  const json* session_json = at_path(manifest, {"runtime", "manifestInference", "session"});
  const Block session{session_json, source, kSessionPath};
  if (session_json && !session_json->is_object()) throw Error(source + ": " + std::string(kSessionPath) + ": expected an object");
  session.allow_only({"compute", "kvcache", "decodeLoop", "perLayerInputs", "prefillChunkSubmitMode",
                      "useFlashPrefillAttention", "useWideTileQ4KPrefill", "retainQ4KMaterialization"},
                     "Lumen does not know what it means");

  // Compute precision: Lumen computes activations, math, accumulation and outputs in f32.
  const Block defaults = session.child("compute").child("defaults");
  session.child("compute").allow_only({"defaults"}, "Lumen does not know what it means");
  defaults.allow_only({"activationDtype", "mathDtype", "accumDtype", "outputDtype"}, "Lumen does not know what it means");
  for (const char* key : {"activationDtype", "mathDtype", "accumDtype", "outputDtype"}) {
    if (auto dtype = defaults.str(key); dtype && *dtype != "f32")
      defaults.fail(key, in_single_quotes(*dtype) + " is not supported: Lumen computes in f32 (only \"f32\" is honoured)");
  }

  if (const json* kvcache = session.find("kvcache"))
    c.kv = kv::kv_config_from_json(*kvcache, source, session.field("kvcache"));

  const Block loop = session.child("decodeLoop");
  loop.allow_only({"batchSize", "stopCheckMode", "readbackInterval", "readbackMode", "ringTokens", "ringStop",
                   "ringStaging", "disableCommandBatching"},
                  "Lumen does not know what it means");
  c.decode_batch = loop.integer("batchSize", 1, 256);
  if (auto mode = loop.str("stopCheckMode"); mode && *mode != "batch" && *mode != "token" && *mode != "per_token")
    loop.fail("stopCheckMode", "unknown mode " + in_single_quotes(*mode) + " (expected batch or token)");

  if (const json* pli = session.find("perLayerInputs"))
    c.per_layer_inputs = per_layer_inputs_from_json(*pli, source, session.field("perLayerInputs"));

  if (auto mode = session.str("prefillChunkSubmitMode"); mode && *mode != "sync" && *mode != "async")
    session.fail("prefillChunkSubmitMode", "unknown mode " + in_single_quotes(*mode) + " (expected sync or async)");
  for (const char* key : {"useFlashPrefillAttention", "useWideTileQ4KPrefill", "retainQ4KMaterialization"})
    session.boolean(key);

  // Tokenizer: runtime.tokenizer (or a top-level tokenizer), its `litertlm` block when present.
  const json* tok_json = at_path(manifest, {"runtime", "tokenizer"});
  std::string tok_path = "runtime.tokenizer";
  if (!tok_json) {
    tok_json = at_path(manifest, {"tokenizer"});
    tok_path = "tokenizer";
  }
  if (tok_json) {
    if (!tok_json->is_object()) throw Error(source + ": " + tok_path + ": expected an object");
    if (const json* inner = at_path(*tok_json, {"litertlm"})) {
      tok_json = inner;
      tok_path += ".litertlm";
      if (!tok_json->is_object()) throw Error(source + ": " + tok_path + ": expected an object");
    }
    const Block tok{tok_json, source, tok_path};
    tok.allow_only({"type", "sentencepieceModel", "vocabSize", "padTokenId", "eosTokenId", "eosTokens", "bosTokenId",
                    "unkTokenId", "addBosToken", "addEosToken"},
                   "Lumen does not know what it means");
    auto& t = c.tokenizer;
    t.where = tok_path;
    t.type = tok.str("type").value_or("");
    tok.str("sentencepieceModel");
    t.vocab_size = tok.integer("vocabSize", 1, INT32_MAX);
    t.bos = tok.integer("bosTokenId", 0, INT32_MAX);
    t.eos = tok.integer("eosTokenId", 0, INT32_MAX);
    t.pad = tok.integer("padTokenId", 0, INT32_MAX);
    tok.integer("unkTokenId", 0, INT32_MAX);
    auto add_stop = [&](int id) {
      if (std::find(c.stop_tokens.begin(), c.stop_tokens.end(), id) == c.stop_tokens.end()) c.stop_tokens.push_back(id);
    };
    if (t.eos) add_stop(*t.eos);
    if (auto list = tok.int_list("eosTokens"))
      for (int id : *list) add_stop(id);
    c.add_bos = tok.boolean("addBosToken");
    if (tok.boolean("addEosToken").value_or(false))
      tok.fail("addEosToken", "true is not supported: a prompt that ends with EOS asks for no answer");
  }
  return c;
}

void apply_run_flags(RunConfig& c, const RunFlags& f) {
  if (f.kv_dtype) {
    auto e = kv::kv_elem_from_name(*f.kv_dtype);
    if (!e || *e == kv::KvElem::Int8 || *e == kv::KvElem::Int4)
      throw Error("--kv-dtype: expected f32, f16 or bf16, got " + in_single_quotes(*f.kv_dtype));
    c.kv.dtype = *e;
  }
  if (f.kv_layout) {
    if (*f.kv_layout == "contiguous") {
      c.kv.layout = kv::KvLayout::Contiguous;
      c.kv.tiering = false;
    } else if (*f.kv_layout == "paged") {
      c.kv.layout = kv::KvLayout::Paged;
    } else if (*f.kv_layout == "tiered") {
      c.kv.layout = kv::KvLayout::Paged;
      c.kv.tiering = true;
    } else {
      throw Error("--kv-layout: expected contiguous, paged or tiered, got " + in_single_quotes(*f.kv_layout));
    }
  }
  if (f.page_size) c.kv.page_size = parse_int_flag("--page-size", *f.page_size, 1, 1 << 20);
  if (f.kv_cold) {
    if (*f.kv_cold == "off") {
      c.kv.tiering = false;
    } else {
      auto e = kv::kv_elem_from_name(*f.kv_cold);
      if (!e) throw Error("--kv-cold: expected off, f32, f16, bf16, int8 or int4, got " + in_single_quotes(*f.kv_cold));
      if (f.kv_layout && *f.kv_layout == "contiguous")
        throw Error("--kv-cold: a cold tier needs pages (--kv-layout paged or tiered), not contiguous");
      c.kv.tiering = true;
      c.kv.cold = *e;
      c.kv.layout = kv::KvLayout::Paged;
    }
  }
  if (f.hot_window) c.kv.hot_window = parse_int_flag("--hot-window", *f.hot_window, 0, 1 << 30);
  if (f.prefill_chunk) c.prefill_chunk = parse_int_flag("--prefill-chunk", *f.prefill_chunk, 1, 1 << 16);
  auto& p = c.per_layer_inputs;
  if (f.ple_table) {
    if (*f.ple_table != "mapped" && *f.ple_table != "resident")
      throw Error("--ple-table: expected mapped or resident, got " + in_single_quotes(*f.ple_table));
    p.resident = *f.ple_table == "resident";
  }
  if (f.ple_row_cache) {
    p.row_cache = *f.ple_row_cache != "off";
    if (p.row_cache) p.row_cache_rows = parse_int_flag("--ple-row-cache", *f.ple_row_cache, 1, INT32_MAX);
  }
  if (f.ple_row_cache_bytes) p.row_cache_bytes = parse_bytes_flag("--ple-row-cache-bytes", *f.ple_row_cache_bytes);
  if (f.ple_row_dtype) {
    if (*f.ple_row_dtype == "f32") p.decoded = model::RowDtype::F32;
    else if (*f.ple_row_dtype == "f16") p.decoded = model::RowDtype::F16;
    else if (*f.ple_row_dtype == "bf16") p.decoded = model::RowDtype::BF16;
    else throw Error("--ple-row-dtype: expected f32, f16 or bf16, got " + in_single_quotes(*f.ple_row_dtype));
  }
  if (f.ple_prefetch) {
    p.prefetch = *f.ple_prefetch != "off";
    if (p.prefetch) p.rows_ahead = parse_int_flag("--ple-prefetch", *f.ple_prefetch, 1, 1 << 20);
  }
  if (f.ple_hot_cache) {
    p.hot_cache = *f.ple_hot_cache != "off";
    if (p.hot_cache) p.hot_tokens = parse_int_flag("--ple-hot-cache", *f.ple_hot_cache, 1, INT32_MAX);
  }
  if (f.ple_hot_bytes) p.hot_bytes = parse_bytes_flag("--ple-hot-bytes", *f.ple_hot_bytes);
  // A manifest's tiered layout and an explicit contiguous layout cannot both hold.
  if (c.kv.tiering && c.kv.layout == kv::KvLayout::Contiguous)
    throw Error("--kv-layout: contiguous has no pages to tier (tiering is on: use paged, or --kv-cold off)");
}

void validate_run_config(const RunConfig& c, const spec::ModelSpec& spec) {
  if (c.prefill_chunk < 1) throw Error("prefill chunk " + std::to_string(c.prefill_chunk) + " must be positive");
  try {
    kv::validate_kv_config(c.kv, spec);
  } catch (const Error& e) {
    throw Error((c.manifest.empty() ? std::string() : c.manifest + ": ") + e.what());
  }
}

void check_tokenizer(const RunConfig& c, const tokenizer::Tokenizer& tok) {
  const auto& t = c.tokenizer;
  if (t.where.empty()) return;
  const std::string at = c.manifest + ": " + t.where + ".";
  if (!t.type.empty()) {
    // Lumen's loaders report "sentencepiece", "hf-bpe" (tokenizer.json) or "gguf-gemma*" (a
    // GGUF's copy of the SentencePiece vocabulary); the manifest says sentencepiece or bpe.
    const std::string kind = tok.kind();
    const bool sp = kind == "sentencepiece" || kind.rfind("gguf-gemma", 0) == 0;
    const bool same = t.type == kind || (t.type == "sentencepiece" && sp) ||
                      ((t.type == "bpe" || t.type == "huggingface" || t.type == "hf") && kind == "hf-bpe");
    if (!same) throw Error(at + "type " + in_single_quotes(t.type) + " does not match the loaded tokenizer (" + kind + ")");
  }
  if (t.vocab_size && *t.vocab_size != tok.vocab_size())
    throw Error(at + "vocabSize " + std::to_string(*t.vocab_size) + " does not match the loaded tokenizer's " +
                std::to_string(tok.vocab_size()) + " tokens");
  auto check_id = [&](const char* key, const std::optional<int>& want, int32_t have) {
    if (want && have >= 0 && *want != have)
      throw Error(at + key + " " + std::to_string(*want) + " does not match the loaded tokenizer's " + std::to_string(have));
  };
  check_id("bosTokenId", t.bos, tok.bos_id());
  check_id("eosTokenId", t.eos, tok.eos_id());
  check_id("padTokenId", t.pad, tok.pad_id());
}

json read_manifest_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open the manifest");
  try {
    return parse_json(in);
  } catch (const json::parse_error& e) {
    throw Error(path + ": not valid JSON (" + std::string(e.what()) + ")");
  }
}

}  // namespace lumen::runtime
