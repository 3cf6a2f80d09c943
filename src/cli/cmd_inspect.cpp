// lumen inspect PATH [--json] [--context N ...]: a .litertlm package or .tflite model listed
// in full (see inspect_litert.h), or the model spec Lumen derives from a model directory,
// config.json, manifest or GGUF file; with --context, the KV cache it would need (bytes per
// token for each geometry, the cache size at N positions, refused up front against
// --memory-limit-mib).
#include <iostream>
#include <memory>
#include <sstream>

#include "base/error.h"
#include "cli/command.h"
#include "cli/inspect_litert.h"
#include "kv/kv_config.h"
#include "runtime/manifest_fields.h"
#include "runtime/run_config.h"
#include "spec/model_spec.h"

namespace {

struct InspectOptions {
  std::string path;
  std::string manifest;  // --manifest: the field table
  bool json = false;
  int64_t context = 0;
  std::string kv_dtype, kv_layout, kv_cold;
  int hot_window = -1;
  int page_size = 0;
  double memory_limit_mib = 0;
};

lumen::kv::KvConfig kv_config_of(const InspectOptions& o) {
  lumen::kv::KvConfig c = lumen::kv::load_kv_config(o.path);
  if (!o.kv_dtype.empty()) {
    auto e = lumen::kv::kv_elem_from_name(o.kv_dtype);
    if (!e) throw lumen::Error("--kv-dtype: expected f32, f16 or bf16, got '" + o.kv_dtype + "'");
    c.dtype = *e;
  }
  if (!o.kv_layout.empty()) {
    if (o.kv_layout == "contiguous") c.layout = lumen::kv::KvLayout::Contiguous;
    else if (o.kv_layout == "paged") c.layout = lumen::kv::KvLayout::Paged;
    else throw lumen::Error("--kv-layout: expected contiguous or paged, got '" + o.kv_layout + "'");
  }
  if (!o.kv_cold.empty()) {
    if (o.kv_cold == "off") {
      c.tiering = false;
    } else {
      auto e = lumen::kv::kv_elem_from_name(o.kv_cold);
      if (!e) throw lumen::Error("--kv-cold: expected off, f32, f16, bf16, int8 or int4, got '" + o.kv_cold + "'");
      c.tiering = true;
      c.cold = *e;
      c.layout = lumen::kv::KvLayout::Paged;
    }
  }
  if (o.hot_window >= 0) c.hot_window = o.hot_window;
  if (o.page_size > 0) c.page_size = o.page_size;
  c.memory_limit = int64_t(o.memory_limit_mib * 1024 * 1024);
  return c;
}

std::string mib(int64_t bytes) {
  std::ostringstream s;
  s.precision(1);
  s << std::fixed << double(bytes) / (1 << 20) << " MiB";
  return s.str();
}

LUMEN_COMMAND(50, [](CLI::App& app) {
  auto opts = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand(
      "inspect", "List a .litertlm package or .tflite model, or print the model spec of a model directory, config.json, manifest or GGUF file");
  cmd->add_option("path", opts->path, ".litertlm, .tflite, .gguf, model directory, config.json or doppler.execution/v1 manifest");
  cmd->add_option("--manifest", opts->manifest,
                  "List every field of this doppler.execution/v1 manifest: honoured, checked, ignored or refused");
  cmd->add_flag("--json", opts->json, "Print JSON instead of text");
  cmd->add_option("--context", opts->context, "Also show the KV cache at this many positions");
  cmd->add_option("--kv-dtype", opts->kv_dtype, "KV dtype (f32, f16, bf16); default: the manifest's, else f32");
  cmd->add_option("--kv-layout", opts->kv_layout, "contiguous or paged");
  cmd->add_option("--kv-cold", opts->kv_cold, "Cold tier of full layers: off, f32, f16, bf16, int8, int4");
  cmd->add_option("--hot-window", opts->hot_window, "Positions of full layers kept hot when tiered");
  cmd->add_option("--page-size", opts->page_size, "Positions per KV page");
  cmd->add_option("--memory-limit-mib", opts->memory_limit_mib, "Refuse a context whose KV cache exceeds this");
  return std::pair{cmd, lumen::cli::Runner([opts] {
    if (!opts->manifest.empty()) {
      if (!opts->path.empty()) throw lumen::Error("inspect: give a PATH or --manifest, not both");
      const auto table = lumen::runtime::manifest_field_table(lumen::runtime::read_manifest_json(opts->manifest), opts->manifest);
      // Strings from files may hold invalid UTF-8: written as U+FFFD rather than refused.
      if (opts->json)
        std::cout << lumen::runtime::field_table_to_json(table).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                  << "\n";
      else std::cout << lumen::runtime::field_table_to_text(table);
      std::cout.flush();
      // A refused field: the table is printed, then the error a run would give.
      if (!table.error.empty()) throw lumen::Error(table.error);
      return 0;
    }
    if (opts->path.empty()) throw lumen::Error("inspect: give a PATH (or --manifest MANIFEST)");
    if (lumen::cli::inspect_litert_file(opts->path, opts->json)) return 0;
    const lumen::spec::ModelSpec spec = lumen::spec::load_spec(opts->path);
    if (opts->context < 0) throw lumen::Error("--context: must not be negative");
    const bool kv = opts->context > 0;
    lumen::kv::KvConfig config;
    lumen::kv::KvFootprint f;
    if (kv) {
      config = kv_config_of(*opts);
      lumen::kv::validate_kv_config(config, spec);
      f = lumen::kv::kv_footprint(spec, config);
      // Refused before anything is printed.
      if (opts->context > spec.max_positions && spec.max_positions > 0)
        throw lumen::Error("--context " + std::to_string(opts->context) + " is beyond the model's " +
                           std::to_string(spec.max_positions) + " positions");
      lumen::kv::check_context_fits(spec, config, opts->context);
    }
    if (opts->json) {
      nlohmann::json j = lumen::spec::spec_to_json(spec);
      if (kv) {
        j["kvcache"] = {{"config", lumen::kv::kv_config_to_text(config)},
                        {"context", opts->context},
                        {"full_layers_bytes_per_token", f.unbounded_hot_bytes_per_token},
                        {"full_layers_cold_bytes_per_token", f.unbounded_cold_bytes_per_token},
                        {"sliding_layers_bytes_per_position", f.bounded_bytes_per_token},
                        {"sliding_layers_max_positions", f.bounded_max_positions},
                        {"bytes_at_context", f.bytes_at(opts->context)}};
      }
      std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      std::cout << lumen::spec::spec_to_text(spec);
    }
    if (kv) {
      if (!opts->json) {
        std::cout << "\nKV cache:        " << lumen::kv::kv_config_to_text(config) << "\n"
                  << (f.contiguous ? "  every layer:   " : "  full layers:   ") << f.unbounded_hot_bytes_per_token
                  << " bytes/token";
        if (f.tiering) std::cout << " hot, " << f.unbounded_cold_bytes_per_token << " bytes/token cold";
        std::cout << "\n";
        if (f.bounded_bytes_per_token > 0)
          std::cout << "  sliding:       " << f.bounded_bytes_per_token << " bytes/position, at most "
                    << f.bounded_max_positions << " positions held ("
                    << mib(f.bounded_bytes_per_token * f.bounded_max_positions) << ")\n";
        std::cout << "  at context " << opts->context << ": " << mib(f.bytes_at(opts->context)) << " ("
                  << int64_t(f.bytes_per_token_at(opts->context)) << " bytes/token on average)\n";
      }
    }
    return 0;
  })};
});

}  // namespace
