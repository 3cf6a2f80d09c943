#include "kv/kv_config.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "base/error.h"
#include "base/json.h"

namespace lumen::kv {
namespace {

using nlohmann::json;

struct Reader {
  const json& obj;
  std::string source, where;

  std::string field(const std::string& key) const { return source + ": " + where + "." + key; }
  [[noreturn]] void fail(const std::string& key, const std::string& msg) const { throw Error(field(key) + ": " + msg); }

  void allow_only(const std::set<std::string>& keys) const {
    for (auto it = obj.begin(); it != obj.end(); ++it)
      if (!keys.count(it.key())) fail(it.key(), "unknown field (the KV cache does not know what it means)");
  }
  const json* find(const std::string& key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  std::string str(const std::string& key, const std::string& fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) fail(key, "expected a string, got " + v->dump());
    return v->get<std::string>();
  }
  int integer(const std::string& key, int fallback, int min_value) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number_integer()) fail(key, "expected an integer, got " + v->dump());
    const int64_t x = v->get<int64_t>();
    if (x < min_value || x > (1 << 30)) fail(key, "must be at least " + std::to_string(min_value) + ", got " + v->dump());
    return int(x);
  }
  double number(const std::string& key, double fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number()) fail(key, "expected a number, got " + v->dump());
    return v->get<double>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(key, "expected true or false, got " + v->dump());
    return v->get<bool>();
  }
  Reader child(const std::string& key) const {
    const json* v = find(key);
    static const json empty = json::object();
    if (v && !v->is_object()) fail(key, "expected an object, got " + v->dump());
    return Reader{v ? *v : empty, source, where + "." + key};
  }
  KvElem float_dtype(const std::string& key, KvElem fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    const std::string s = str(key, "");
    if (s == "f32") return KvElem::F32;
    if (s == "f16") return KvElem::F16;
    if (s == "bf16") return KvElem::BF16;
    fail(key, "unsupported dtype " + v->dump() + " (expected f16, bf16 or f32)");
  }
};

}  // namespace

const char* kv_elem_name(KvElem e) {
  switch (e) {
    case KvElem::F32: return "f32";
    case KvElem::F16: return "f16";
    case KvElem::BF16: return "bf16";
    case KvElem::Int8: return "int8";
    case KvElem::Int4: return "int4";
  }
  return "?";
}

std::optional<KvElem> kv_elem_from_name(const std::string& name) {
  for (KvElem e : {KvElem::F32, KvElem::F16, KvElem::BF16, KvElem::Int8, KvElem::Int4})
    if (name == kv_elem_name(e)) return e;
  return std::nullopt;
}

std::string kv_config_to_text(const KvConfig& c) {
  std::ostringstream o;
  o << (c.layout == KvLayout::Contiguous ? "contiguous" : "paged") << " " << kv_elem_name(c.dtype);
  if (c.layout == KvLayout::Paged) o << ", pages of " << c.page_size;
  if (c.tiering) {
    o << ", tiered: last " << c.hot_window << " positions hot, older pages " << kv_elem_name(c.cold);
    if (c.cold == KvElem::Int8 || c.cold == KvElem::Int4) o << " in blocks of " << c.block_size;
  } else {
    o << ", tiering off";
  }
  return o.str();
}

KvConfig kv_config_from_json(const json& kvcache, const std::string& source, const std::string& where) {
  if (!kvcache.is_object()) throw Error(source + ": " + where + ": expected an object");
  const Reader r{kvcache, source, where};
  r.allow_only({"kvDtype", "layout", "pageSize", "tiering", "quantization"});
  KvConfig c;
  c.dtype = r.float_dtype("kvDtype", KvElem::F16);
  c.page_size = r.integer("pageSize", 256, 1);
  const std::string layout = r.str("layout", "contiguous");
  if (layout == "contiguous") c.layout = KvLayout::Contiguous;
  else if (layout == "paged") c.layout = KvLayout::Paged;
  else if (layout == "tiered") { c.layout = KvLayout::Paged; c.tiering = true; }
  else if (layout == "contiguous_quantized")
    r.fail("layout", "\"contiguous_quantized\" is not supported: use layout \"tiered\" with tiering.compression int8/int4");
  else r.fail("layout", "unknown layout \"" + layout + "\" (expected contiguous, paged or tiered)");

  const Reader t = r.child("tiering");
  t.allow_only({"mode", "hotWindow", "coldPageSize", "coldDtype", "compression", "gating"});
  const std::string mode = t.str("mode", "off");
  if (mode == "on" || mode == "tiered") c.tiering = true;
  else if (mode != "off") t.fail("mode", "unknown tiering mode \"" + mode + "\" (expected off or on)");
  if (c.tiering && c.layout == KvLayout::Contiguous)
    t.fail("mode", "tiering needs layout \"paged\" or \"tiered\", not \"contiguous\"");
  c.hot_window = t.integer("hotWindow", 1024, 0);
  const int cold_page = t.integer("coldPageSize", c.page_size, 1);
  if (cold_page != c.page_size)
    t.fail("coldPageSize", "must equal pageSize (" + std::to_string(c.page_size) + "): cold pages are demoted hot pages");
  c.cold = t.float_dtype("coldDtype", KvElem::F16);
  const Reader comp = t.child("compression");
  comp.allow_only({"mode", "blockSize", "bitWidth", "prodMode"});
  const std::string cmode = comp.str("mode", "none");
  const int block = comp.integer("blockSize", 32, 1);
  const int bits = comp.integer("bitWidth", 4, 1);
  if (comp.boolean("prodMode", false))
    comp.fail("prodMode", "true is not supported (only plain symmetric block quantization)");
  if (cmode == "int8" || cmode == "int4" || cmode == "quantized") {
    const int width = cmode == "int8" ? 8 : cmode == "int4" ? 4 : bits;
    if (width != 8 && width != 4) comp.fail("bitWidth", "must be 8 or 4, got " + std::to_string(width));
    if (cmode != "quantized" && comp.find("bitWidth") && bits != width)
      comp.fail("bitWidth", std::to_string(bits) + " contradicts mode \"" + cmode + "\"");
    c.cold = width == 8 ? KvElem::Int8 : KvElem::Int4;
    c.block_size = block;
  } else if (cmode != "none") {
    comp.fail("mode", "unknown compression mode \"" + cmode + "\" (expected none, int8, int4 or quantized)");
  }
  const Reader g = t.child("gating");
  g.allow_only({"mode", "minAluBwRatio"});
  // Gating decides on a GPU whether decompression pays for the bandwidth it saves; on the
  // CPU the tiering config is applied as written, so only the neutral values are accepted.
  const std::string gmode = g.str("mode", "auto");
  if (gmode != "auto" && gmode != "off") g.fail("mode", "unknown gating mode \"" + gmode + "\" (expected auto or off)");
  if (g.number("minAluBwRatio", 0) != 0) g.fail("minAluBwRatio", "only 0 (no gating) is supported on the CPU");

  const Reader q = r.child("quantization");
  q.allow_only({"mode", "bitWidth", "prodMode"});
  if (q.str("mode", "none") != "none")
    q.fail("mode", "whole-cache quantization is not supported: use tiering.compression for the cold tier");
  q.integer("bitWidth", 4, 1);
  if (q.boolean("prodMode", false)) q.fail("prodMode", "true is not supported");
  return c;
}

KvConfig load_kv_config(const std::string& path) {
  if (path.size() < 5 || path.substr(path.size() - 5) != ".json") return KvConfig{};
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open");
  json doc;
  try {
    doc = parse_json(in);
  } catch (const std::exception& e) {
    throw Error(path + ": not valid JSON");
  }
  const json* node = &doc;
  for (const char* key : {"runtime", "manifestInference", "session", "kvcache"}) {
    if (!node->is_object() || !node->contains(key) || (*node)[key].is_null()) return KvConfig{};
    node = &(*node)[key];
  }
  return kv_config_from_json(*node, path, "runtime.manifestInference.session.kvcache");
}

void validate_kv_config(const KvConfig& c, const spec::ModelSpec& spec) {
  if (c.page_size < 1) throw Error("KV cache: page size must be at least 1");
  if (c.hot_window < 0) throw Error("KV cache: hot window must not be negative");
  if (c.dtype == KvElem::Int8 || c.dtype == KvElem::Int4)
    throw Error("KV cache: kvDtype must be f32, f16 or bf16 (int8/int4 are cold-tier formats)");
  if (c.tiering && (c.cold == KvElem::Int8 || c.cold == KvElem::Int4)) {
    for (const auto& ls : spec.layers) {
      if (c.block_size < 1 || ls.head_dim % c.block_size != 0)
        throw Error("KV cache: compression block size " + std::to_string(c.block_size) +
                    " does not divide head dim " + std::to_string(ls.head_dim));
      if (c.cold == KvElem::Int4 && c.block_size % 2 != 0)
        throw Error("KV cache: int4 compression needs an even block size, got " + std::to_string(c.block_size));
    }
  }
}

int64_t kv_row_bytes(KvElem e, int64_t row_elems, int block_size) {
  switch (e) {
    case KvElem::F32: return 2 * row_elems * 4;
    case KvElem::F16: case KvElem::BF16: return 2 * row_elems * 2;
    case KvElem::Int8: return 2 * (row_elems + row_elems / block_size * 4);
    case KvElem::Int4: return 2 * (row_elems / 2 + row_elems / block_size * 4);
  }
  return 0;
}

KvFootprint kv_footprint(const spec::ModelSpec& spec, const KvConfig& c) {
  KvFootprint f;
  f.contiguous = c.layout == KvLayout::Contiguous;
  f.page_size = f.contiguous ? 1 : c.page_size;
  f.tiering = c.tiering && !f.contiguous;
  const int ps = f.page_size;
  for (const auto& ls : spec.layers) {
    if (!ls.stores_kv()) continue;  // KV-shared: reads another layer's rows
    const int64_t row = int64_t(ls.num_kv_heads) * ls.head_dim;
    if (ls.window > 0 && !f.contiguous) {
      f.bounded_bytes_per_token += kv_row_bytes(c.dtype, row, c.block_size);
      // After each step a sliding layer keeps the pages from (last - window + 2) on.
      const int64_t pages = ls.window >= 2 ? (ls.window - 2) / ps + 2 : 1;
      f.bounded_max_positions = std::max(f.bounded_max_positions, pages * ps);
    } else {
      f.unbounded_hot_bytes_per_token += kv_row_bytes(c.dtype, row, c.block_size);
      f.unbounded_cold_bytes_per_token += kv_row_bytes(f.tiering ? c.cold : c.dtype, row, c.block_size);
    }
  }
  // A page is demoted once all its positions are older than the hot window, so up to
  // hot_window + page_size - 1 positions (whole pages) stay hot.
  f.hot_positions = f.tiering ? (int64_t(c.hot_window) + ps - 1) / ps * ps + ps : 0;
  return f;
}

int64_t KvFootprint::bytes_at(int64_t context) const {
  if (context <= 0) return 0;
  const int64_t ps = page_size;
  const int64_t held = (context + ps - 1) / ps * ps;
  int64_t bytes = std::min(held, bounded_max_positions) * bounded_bytes_per_token;
  if (!tiering) return bytes + held * unbounded_hot_bytes_per_token;
  const int64_t hot = std::min(held, hot_positions);
  return bytes + hot * unbounded_hot_bytes_per_token + (held - hot) * unbounded_cold_bytes_per_token;
}

void check_context_fits(const spec::ModelSpec& spec, const KvConfig& c, int64_t context) {
  if (c.memory_limit <= 0) return;
  const int64_t need = kv_footprint(spec, c).bytes_at(context);
  if (need > c.memory_limit) {
    std::ostringstream o;
    o.precision(1);
    o << std::fixed << "KV cache for a context of " << context << " positions needs " << double(need) / (1 << 20)
      << " MiB (" << kv_config_to_text(c) << "), over the memory limit of " << double(c.memory_limit) / (1 << 20)
      << " MiB";
    throw Error(o.str());
  }
}

}  // namespace lumen::kv
