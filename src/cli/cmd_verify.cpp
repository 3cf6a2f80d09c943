// lumen verify PACKAGE --against SOURCE [--map MAP] [--config CONFIG] [--out RECEIPT.json]:
// parity of a .litertlm package's mapped constants with an independent safetensors checkpoint
// of the same model after the same quantization, then of the first-token logits; a JSON
// receipt (schema lumen.litert-receipt/v1) that `run`/`logits` accept to lift a manifest's
// `unsupported` refusal. Exit 0: pass; 2: fail; 1: bad input.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "formats/temp_files.h"
#include "cli/command.h"
#include "formats/litertlm.h"
#include "formats/safetensors.h"
#include "formats/sha256.h"
#include "model/weights_litert.h"
#include "quant/weight_matrix.h"
#include "runtime/engine.h"
#include "runtime/litert_load.h"
#include "spec/litert_map.h"
#include "spec/litert_receipt.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace lumen;

struct VerifyOptions {
  std::string package, against, map, config, out, tokens = "2,10,20,30,40,50,60,70";
  double rtol = 1e-5, atol = 1e-6;
  std::optional<double> logits_tol;  // default 1e-4 * (1 + max |source logit|)
  bool list_constants = false;
};


// `verify PACKAGE --constants`: the constant table (what a map file refers to) and its hash,
// with the (layer, role) the name rules (or --map) give each constant.
int list_constants(const VerifyOptions& o) {
  const formats::LitertlmFile pkg = formats::LitertlmFile::open(o.package);
  const spec::PackageConstants pc = spec::collect_package_constants(pkg);
  const spec::LitertMap map = o.map.empty() ? spec::map_by_names(pc) : spec::load_map_file(o.map, pc);
  std::map<size_t, std::string> mapped;
  for (const auto& e : map.entries) {
    auto& text = mapped[e.constant];
    text += (text.empty() ? "" : ", ") + spec::layer_role_text(e.layer, e.role);
  }
  fmt::print("# package_tensor_table_sha256 {}\n# index\ttype\tshape\tmaps to ({})\tname\n", pc.table_sha256,
             map.kind == "file" ? map.path : std::string("name rules"));
  for (const auto& c : pc.constants) {
    auto it = mapped.find(c.index);
    const char* t = formats::tflite_type_name(c.type);
    fmt::print("{}\t{}\t{}\t{}\t{}\n", c.index, t ? t : "?", c.shape_text(), it == mapped.end() ? "-" : it->second,
               printable(c.name));
  }
  return 0;
}

// A source checkpoint's tensors as f32, by checkpoint name without prefix.
class Source {
 public:
  explicit Source(const std::string& path) : ckpt_(formats::SafetensorsCheckpoint::open(path)) {}
  const formats::TensorView* find(const std::string& name) const {
    if (name == "lm_head.weight")
      if (auto* t = ckpt_.find(name)) return t;
    for (const char* prefix : {"model.", "model.language_model.", ""})
      if (auto* t = ckpt_.find(prefix + name)) return t;
    return nullptr;
  }
  void forget() { cache_.clear(); }
  const std::vector<float>& f32(const std::string& name) {
    auto it = cache_.find(name);
    if (it != cache_.end()) return it->second;
    const formats::TensorView* t = find(name);
    std::vector<float> v(size_t(t->numel()));
    quant::WeightFormat f;
    switch (t->dtype) {
      case DType::F32: f = quant::WeightFormat::F32; break;
      case DType::F16: f = quant::WeightFormat::F16; break;
      case DType::BF16: f = quant::WeightFormat::BF16; break;
      default: throw Error(t->file + ": tensor '" + t->name + "' is " + std::string(dtype_name(t->dtype)) + "; verify reads F32, F16, BF16");
    }
    std::vector<std::byte> aligned(t->data, t->data + t->nbytes);
    quant::to_f32(f, aligned.data(), t->numel(), v.data());
    return cache_.emplace(name, std::move(v)).first->second;
  }

 private:
  formats::SafetensorsCheckpoint ckpt_;
  std::map<std::string, std::vector<float>> cache_;
};

struct Compared {
  double max_abs = 0, mean_abs = 0, max_src = 0;
};

Compared compare(const float* a, const std::vector<float>& b) {
  Compared c;
  double sum = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    c.max_abs = std::max(c.max_abs, d);
    c.max_src = std::max(c.max_src, double(std::fabs(b[i])));
    sum += d;
  }
  c.mean_abs = b.empty() ? 0 : sum / double(b.size());
  return c;
}


std::string hash_source(const std::string& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && (e.path().extension() == ".safetensors" || e.path().filename() == "config.json"))
        files.push_back(e.path());
  } else {
    files.push_back(dir);
  }
  std::sort(files.begin(), files.end());
  formats::Sha256 h;
  for (const auto& f : files) h.update(f.filename().string() + "\t" + formats::sha256_file(f.string()) + "\n");
  return h.hex();
}

// Contiguous runs "3..4" of a sorted list.
std::string runs(const std::vector<int>& xs) {
  std::string out;
  for (size_t i = 0; i < xs.size();) {
    size_t j = i;
    while (j + 1 < xs.size() && xs[j + 1] == xs[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j == i ? std::to_string(xs[i]) : std::to_string(xs[i]) + ".." + std::to_string(xs[j]);
    i = j + 1;
  }
  return out;
}

void write_atomically(const std::string& path, const std::string& text) {
  formats::TempFile file(path);  // removed (and unregistered) unless committed
  {
    std::ofstream out(file.temp_path(), std::ios::binary);
    if (!out) throw Error(path + ": cannot write the receipt");
    out << text;
    out.flush();
    if (!out) throw Error(path + ": cannot write the receipt");
  }
  file.commit();
}

int verify(const VerifyOptions& o) {
  if (o.package.empty()) throw Error("verify: give the package (lumen verify PACKAGE --against SOURCE)");
  if (o.list_constants) return list_constants(o);
  if (o.against.empty()) throw Error("verify: --against SOURCE is required (a safetensors checkpoint of the same model)");
  if (!(o.rtol >= 0)) throw Error("--tolerance: must be >= 0");
  const auto tokens = cli::parse_token_list(o.tokens);
  const formats::LitertlmFile pkg = formats::LitertlmFile::open(o.package);
  const spec::PackageConstants pc = spec::collect_package_constants(pkg);
  const spec::LitertMap map = o.map.empty() ? spec::map_by_names(pc) : spec::load_map_file(o.map, pc);
  std::error_code ec;
  if (!fs::exists(o.against, ec)) throw Error(o.against + ": no such source checkpoint");
  const std::string config = !o.config.empty() ? o.config
                             : fs::is_directory(o.against, ec) ? (fs::path(o.against) / "config.json").string()
                                                               : (fs::path(o.against).parent_path() / "config.json").string();
  const spec::ModelSpec spec = spec::load_spec(config);
  Source src(o.against);

  json receipt;
  receipt["schema"] = spec::kReceiptSchema;
  receipt["package"] = {{"path", o.package}, {"sha256", formats::sha256_file(o.package)}, {"constants", pc.constants.size()},
                        {"tensor_table_sha256", pc.table_sha256}};
  receipt["source"] = {{"path", o.against}, {"sha256", hash_source(o.against)}, {"config", config}};
  receipt["map"] = {{"kind", map.kind}, {"entries", map.entries.size()}};
  if (map.kind == "file") {
    receipt["map"]["path"] = map.path;
    receipt["map"]["sha256"] = map.sha256;
  }
  receipt["tolerance"] = {{"rule", "max |package - source| <= atol + rtol * max |source|, per tensor"},
                          {"atol", o.atol}, {"rtol", o.rtol}};
  std::vector<std::string> faults;
  json tensors = json::array();

  // Every mapped tensor, dequantized exactly, against the source tensor of the same name.
  struct Mapped {
    model::LitertTensor t;
    bool match = false;
    size_t row = 0;  // its entry in `tensors`
  };
  std::vector<Mapped> mapped;
  std::set<std::string> produced;
  for (const spec::MapEntry& e : map.entries) {
    std::vector<model::LitertTensor> parts;
    try {
      parts = model::decode_litert_entry(spec, pc, map, e, model::LitertTarget::F32);
    } catch (const Error& err) {
      faults.push_back(err.what());
      tensors.push_back({{"constant", e.constant}, {"layer", e.layer}, {"role", e.role}, {"match", false},
                         {"problem", err.what()}});
      continue;
    }
    for (auto& t : parts) {
      produced.insert(t.name);
      json row = {{"constant", t.constant}, {"constant_name", pc.constants[t.constant].name}, {"layer", t.layer},
                  {"role", t.role}, {"shape", t.shape}, {"storage", formats::tflite_type_name(pc.constants[t.constant].type)}};
      const formats::TensorView* s = src.find(t.name);
      if (!s || s->shape != t.shape) {
        const std::string why = !s ? "the source has no tensor " + t.name
                                   : "the source's " + t.name + " is " + formats::shape_to_string(s->shape);
        faults.push_back(spec::layer_role_text(t.layer, t.role) + ": " + why);
        row["match"] = false;
        row["problem"] = why;
        tensors.push_back(row);
        mapped.push_back({std::move(t), false, tensors.size() - 1});
        continue;
      }
      const Compared c = compare(reinterpret_cast<const float*>(t.data.data()), src.f32(t.name));
      const bool match = c.max_abs <= o.atol + o.rtol * c.max_src;
      row["max_abs_error"] = c.max_abs;
      row["mean_abs_error"] = c.mean_abs;
      row["match"] = match;
      tensors.push_back(row);
      mapped.push_back({std::move(t), match, tensors.size() - 1});
    }
  }

  // Where a mismatching tensor's numbers really come from: the source tensor of the same shape
  // (same layer, any role; same role, nearby layers) it matches.
  auto matches_source = [&](const model::LitertTensor& t, const std::string& name) {
    const formats::TensorView* s = src.find(name);
    if (!s || s->shape != t.shape) return false;
    const Compared c = compare(reinterpret_cast<const float*>(t.data.data()), src.f32(name));
    return c.max_abs <= o.atol + o.rtol * c.max_src;
  };
  const auto expected = spec::expected_tensors(spec);
  for (const auto& m : mapped) {
    if (m.match) continue;
    std::string holds;
    for (const auto& want : expected) {
      if (want.name == m.t.name || want.shape != m.t.shape) continue;
      const auto [layer, role, transform] = spec::role_of_tensor_name(want.name);
      if (layer != m.t.layer && role != m.t.role) continue;
      if (layer >= 0 && m.t.layer >= 0 && std::abs(layer - m.t.layer) > 3) continue;
      if (matches_source(m.t, want.name)) {
        holds = spec::layer_role_text(layer, role);
        break;
      }
    }
    const std::string what = spec::layer_role_text(m.t.layer, m.t.role) + ": " + pc.constants[m.t.constant].describe() +
                             " does not match the source" +
                             (holds.empty() ? std::string() : "; it holds source " + holds);
    if (!holds.empty()) tensors[m.row]["holds_source"] = holds;
    faults.push_back(what);
  }

  // Groups: which source layer each package layer group holds (most matching roles, within 3).
  std::set<int> groups;
  for (const auto& m : mapped)
    if (m.t.layer >= 0) groups.insert(m.t.layer);
  std::map<int, int> best_of;
  for (int g : groups) {
    int best = -1, best_count = 0;
    for (int l = std::max(0, g - 3); l <= std::min(spec.num_layers() - 1, g + 3); ++l) {
      int count = 0;
      for (const auto& m : mapped)
        if (m.t.layer == g && matches_source(m.t, spec::checkpoint_name(l, m.t.role))) ++count;
      if (count > best_count || (count == best_count && l == g)) best = l, best_count = count;
    }
    if (best_count > 0) best_of[g] = best;
  }
  std::vector<int> no_group, shifted;
  std::set<int> held;
  for (auto [g, l] : best_of) {
    held.insert(l);
    if (l != g) shifted.push_back(g);
  }
  for (int l = 0; l < spec.num_layers(); ++l)
    if (!held.count(l)) no_group.push_back(l);
  json layers = {{"source_layers", spec.num_layers()}, {"package_groups", groups.size()}};
  json group_map = json::object();
  for (auto [g, l] : best_of) group_map[std::to_string(g)] = l;
  layers["group_holds_source_layer"] = group_map;
  if (!no_group.empty() || !shifted.empty()) {
    std::string what;
    if (!no_group.empty())
      what = "source layer" + std::string(no_group.size() > 1 ? "s " : " ") + runs(no_group) + " ha" +
             (no_group.size() > 1 ? "ve" : "s") + " no group";
    if (!shifted.empty()) {
      // Report each run of groups with one shift.
      std::vector<std::pair<std::vector<int>, int>> by_shift;
      for (int g : shifted) {
        const int d = best_of[g] - g;
        if (by_shift.empty() || by_shift.back().second != d || by_shift.back().first.back() + 1 != g)
          by_shift.push_back({{g}, d});
        else
          by_shift.back().first.push_back(g);
      }
      for (const auto& [gs, d] : by_shift)
        what += (what.empty() ? "" : "; ") + std::string("groups ") + runs(gs) + " shifted by " + (d > 0 ? "+" : "") +
                std::to_string(d);
    }
    layers["finding"] = what;
    faults.insert(faults.begin(), what);
  }
  receipt["layers"] = layers;
  // Tensors the spec needs that nothing maps to.
  json missing = json::array();
  for (const auto& want : expected)
    if (!produced.count(want.name)) missing.push_back(want.name);
  if (!missing.empty()) {
    faults.push_back(std::to_string(missing.size()) + " tensor(s) the model needs have no constant, e.g. " +
                     missing[0].get<std::string>());
    receipt["unmapped_source_tensors"] = missing;
  }
  receipt["tensors"] = tensors;

  // First-token logits: the package (dequantized exactly, then as the int kernels run it) vs the source.
  json logits = {{"tokens", tokens}};
  if (faults.empty()) {
    runtime::LoadOptions lo;
    lo.allow_unverified = true;  // verifying is what lifts the gate
    lo.litert_config = config;
    lo.litert_map = o.map;
    runtime::LoadOptions source_options;
    source_options.allow_unverified = true;
    src.forget();  // the tensors' f32 copies are not needed any more
    auto source_engine = runtime::Engine::load(o.against, source_options);
    const auto ref = source_engine->logits_all(tokens);
    const int64_t V = source_engine->spec().vocab_size;
    source_engine.reset();
    const float* ref_last = ref.data() + (int64_t(tokens.size()) - 1) * V;
    double ref_max = 0;
    for (int64_t i = 0; i < V; ++i) ref_max = std::max(ref_max, double(std::fabs(ref_last[i])));
    const int32_t ref_top = runtime::argmax(ref_last, V);
    for (const char* mode : {"f32", "kernels"}) {
      lo.quant = std::string(mode) == "f32" ? "f32" : "";
      auto engine = runtime::Engine::load(o.package, lo);
      const auto got = engine->logits_all(tokens);
      const float* last = got.data() + (int64_t(tokens.size()) - 1) * V;
      double max_abs = 0;
      for (int64_t i = 0; i < V; ++i) max_abs = std::max(max_abs, double(std::fabs(last[i] - ref_last[i])));
      const int32_t top = runtime::argmax(last, V);
      logits[mode] = {{"max_abs_diff", max_abs}, {"argmax", top}, {"source_argmax", ref_top}};
      if (std::string(mode) == "f32") {
        const double tol = o.logits_tol.value_or(1e-4 * (1 + ref_max));
        const bool ok = max_abs <= tol && top == ref_top;
        logits[mode]["tolerance"] = tol;
        logits[mode]["match"] = ok;
        if (!ok)
          faults.push_back(fmt::format("first-token logits (weights dequantized exactly) differ from the source's by {:.3g} "
                                       "(tolerance {:.3g}), argmax {} vs {}", max_abs, tol, top, ref_top));
      } else {
        logits[mode]["note"] = "int8 activations on Q4_0/Q8_0 weights: informational, not part of the verdict";
      }
    }
  } else {
    logits["skipped"] = "tensor parity failed";
  }
  receipt["first_token_logits"] = logits;
  receipt["verdict"] = faults.empty() ? "pass" : "fail";
  receipt["faults"] = faults;

  // Report.
  fmt::print("package  {} (sha256 {})\n", o.package, receipt["package"]["sha256"].get<std::string>());
  fmt::print("source   {} (sha256 {})\n", o.against, receipt["source"]["sha256"].get<std::string>());
  fmt::print("map      {}\n", map.kind == "file" ? map.path + " (sha256 " + map.sha256 + ")" : std::string("name rules"));
  fmt::print("tolerance per tensor: max |package - source| <= {:g} + {:g} * max |source|\n", o.atol, o.rtol);
  fmt::print("{:>5}  {:<28} {:>8}  {:>12} {:>12}  {}\n", "layer", "role", "constant", "max abs err", "mean abs err", "match");
  for (const auto& t : tensors) {
    if (!t.contains("max_abs_error")) continue;
    fmt::print("{:>5}  {:<28} {:>8}  {:>12.4g} {:>12.4g}  {}{}\n", t["layer"].get<int>(), t["role"].get<std::string>(),
               t["constant"].get<size_t>(), t["max_abs_error"].get<double>(), t["mean_abs_error"].get<double>(),
               t["match"].get<bool>() ? "yes" : "NO",
               t.contains("holds_source") ? " (holds source " + t["holds_source"].get<std::string>() + ")" : "");
  }
  if (logits.contains("f32"))
    fmt::print("first-token logits: max abs diff {:.3g} (dequantized), {:.3g} (int kernels); argmax {} / {} vs source {}\n",
               logits["f32"]["max_abs_diff"].get<double>(), logits["kernels"]["max_abs_diff"].get<double>(),
               logits["f32"]["argmax"].get<int>(), logits["kernels"]["argmax"].get<int>(),
               logits["f32"]["source_argmax"].get<int>());
  for (const auto& f : faults) fmt::print("fault: {}\n", f);
  fmt::print("verdict: {}\n", faults.empty() ? "PASS" : "FAIL");
  if (!o.out.empty()) write_atomically(o.out, receipt.dump(1) + "\n");
  std::fflush(stdout);
  return faults.empty() ? 0 : 2;
}

LUMEN_COMMAND(75, [](CLI::App& app) {
  auto o = std::make_shared<VerifyOptions>();
  auto* cmd = app.add_subcommand("verify", "Check a .litertlm package's weights against a source checkpoint; write a parity receipt");
  cmd->add_option("package", o->package, "The .litertlm package");
  cmd->add_option("--against", o->against, "Source: safetensors checkpoint directory of the same model after the same quantization");
  cmd->add_option("--map", o->map, "A lumen.litert-map/v1 file (default: map constants by their names)");
  cmd->add_option("--config", o->config, "The model's config.json or manifest (default: SOURCE/config.json)");
  cmd->add_option("--out", o->out, "Write the JSON receipt here");
  cmd->add_option("--tokens", o->tokens, "Token ids for the first-token logits check");
  cmd->add_option("--logits-tolerance", o->logits_tol,
                  "Max |package - source| of the first-token logits (default 1e-4 x (1 + max |source logit|): a source "
                  "after the same quantization); the argmax must agree in any case");
  cmd->add_flag("--constants", o->list_constants, "List the package's constants, their table hash and what they map to; no check");
  cmd->add_option("--tolerance", o->rtol, "Relative tolerance per tensor (of max |source|; default 1e-5)");
  return std::pair{cmd, cli::Runner([o] { return verify(*o); })};
});

}  // namespace
