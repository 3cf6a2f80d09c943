#include "runtime/bench.h"

#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <random>
#include <set>

#include <fmt/format.h>

#include "base/error.h"
#include "base/json.h"
#include "kernels/cpu_features.h"
#include "kernels/machine_probe.h"
#include "kernels/thread_pool.h"
#include "kv/contiguous_cache.h"
#include "runtime/engine.h"

namespace lumen::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CPU seconds the process has used (user + system, all threads).
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

uint64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return uint64_t(u.ru_maxrss) * 1024;
}

}  // namespace

nlohmann::json model_counters_json(const model::GemmaModel& m) {
  nlohmann::json j;
  if (const model::PerLayerInputs* p = m.per_layer_inputs()) {
    const model::PerLayerInputStats s = p->stats();
    const uint64_t asked = s.row_hits + s.row_misses, prepared = s.hot_hits + s.hot_misses;
    j["per_layer_inputs"] = {{"tokens", s.tokens},
                             {"hot_hits", s.hot_hits},
                             {"hot_misses", s.hot_misses},
                             {"hot_hit_rate", prepared ? double(s.hot_hits) / double(prepared) : 0.0},
                             {"hot_entries", s.hot_entries},
                             {"row_hits", s.row_hits},
                             {"row_misses", s.row_misses},
                             {"row_hit_rate", asked ? double(s.row_hits) / double(asked) : 0.0},
                             {"row_evictions", s.row_evictions},
                             {"row_entries", s.row_entries},
                             {"row_bytes", s.row_bytes},
                             {"rows_queued", s.rows_queued},
                             {"rows_prefetched", s.rows_prefetched},
                             {"table_bytes_read", s.table_bytes_read},
                             {"table_row_bytes", p->table_row_bytes()},
                             {"config", model::per_layer_input_config_to_text(p->config())}};
  } else {
    j["per_layer_inputs"] = nullptr;
  }
  bool moe = false;
  for (const auto& l : m.spec().layers) moe = moe || l.moe();
  if (moe) {
    const model::ExpertCounters c = m.expert_counters();
    j["experts"] = {{"bytes_read", c.bytes}, {"selections", c.selections}, {"rows", c.rows}};
  } else {
    j["experts"] = nullptr;
  }
  return j;
}

MachineLimits measure_machine_limits() {
  MachineLimits m;
  m.threads = kernels::ThreadPool::global().size();
  m.isa = kernels::isa_name(kernels::active_isa());
  m.read_bandwidth = kernels::measure_read_bandwidth();
  m.int8_peak = kernels::measure_int8_peak(kernels::active_isa(), 3, &m.int8_peak_per_core_cpu);
  m.source = "measured";
  return m;
}

nlohmann::json limits_to_json(const MachineLimits& m) {
  return {{"read_bandwidth_gbs", m.read_bandwidth / 1e9}, {"int8_peak_gops", m.int8_peak / 1e9},
          {"int8_peak_gops_per_core_cpu_s", m.int8_peak_per_core_cpu / 1e9},
          {"threads", m.threads}, {"isa", m.isa}, {"source", m.source}};
}

MachineLimits limits_from_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open for reading");
  try {
    nlohmann::json j = parse_json(in);
    if (j.contains("machine")) j = j["machine"];
    MachineLimits m;
    m.read_bandwidth = j.at("read_bandwidth_gbs").get<double>() * 1e9;
    m.int8_peak = j.at("int8_peak_gops").get<double>() * 1e9;
    m.int8_peak_per_core_cpu = j.value("int8_peak_gops_per_core_cpu_s", 0.0) * 1e9;
    m.threads = j.value("threads", 0);
    m.isa = j.value("isa", "");
    m.source = path;
    if (m.read_bandwidth <= 0 || m.int8_peak <= 0) throw Error(path + ": machine limits must be positive");
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not a `lumen bench --machine --json` output (" + e.what() + ")");
  }
}

BenchResult run_bench(const std::string& model_path, const BenchOptions& o, const MachineLimits& limits) {
  if (o.n_prompt < 1 || o.n_gen < 1) throw Error("bench: -p and -n must be at least 1");
  BenchResult r;
  r.model = model_path;
  r.isa = kernels::isa_name(kernels::active_isa());
  r.threads = kernels::ThreadPool::global().size();
  r.limits = limits;
  r.n_prompt = o.n_prompt;
  r.n_gen = o.n_gen;

  auto t0 = Clock::now();
  LoadOptions load_options;
  load_options.quant = o.quant;
  load_options.imatrix = o.imatrix;
  auto engine = Engine::load(model_path, load_options);
  r.load_s = since(t0);
  const auto& spec = engine->spec();
  const auto& w = engine->model().weights();
  if (spec.has_per_layer_inputs()) {
    RunConfig run;
    run.per_layer_inputs = o.per_layer_inputs;
    engine->set_run_config(run);
  }

  // Bytes a decode step reads from the dense matrices: every layer matrix once, plus the
  // output projection. Experts and per-layer input rows are measured during the decode.
  std::set<const void*> seen;
  uint64_t layer_params = 0;
  double expert_active_params = 0;
  auto count = [&](const quant::WeightMatrix& m, bool decode) {
    if (!m.data) return;
    if (decode) r.decode_bytes_per_token += m.storage_bytes();
    if (seen.insert(m.data).second) r.weight_bytes += m.storage_bytes();
  };
  for (size_t li = 0; li < w.layers.size(); ++li) {
    const auto& l = w.layers[li];
    for (const auto* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj, &l.router,
                          &l.per_layer_gate, &l.per_layer_projection}) {
      count(*m, true);
      if (m->data) layer_params += uint64_t(m->rows) * uint64_t(m->cols);
    }
    for (const auto* e : {&l.expert_gate_up, &l.expert_down}) {
      if (!e->data) continue;
      r.weight_bytes += e->storage_bytes();
      const auto& ls = spec.layers[li];
      expert_active_params += double(ls.top_k_experts) * double(e->rows) * double(e->cols);
    }
  }
  count(w.lm_head, true);
  count(w.embed_tokens, false);
  count(w.per_layer_table, false);
  count(w.per_layer_model_projection, false);
  // The prefill's matmuls: every layer matrix (and the chosen experts' share) for every prompt
  // token, the output projection for the last one only (attention's own products are not
  // counted).
  r.prefill_int8_ops = 2.0 * (double(layer_params) + expert_active_params) * o.n_prompt +
                       2.0 * double(w.lm_head.rows) * double(w.lm_head.cols);

  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> tok(4, spec.vocab_size - 1);
  {
    // Prefill: one batched forward over the prompt; logits only for the last row.
    kv::ContiguousCache cache(spec);
    model::SequenceKv* caches[] = {&cache};
    std::vector<model::BatchRow> rows;
    for (int i = 0; i < o.n_prompt; ++i) rows.push_back({0, i, i == 0 ? 2 : tok(rng), i + 1 == o.n_prompt});
    std::vector<float> logits;
    t0 = Clock::now();
    const double c0 = cpu_seconds();
    engine->model().forward(rows, caches, logits);
    r.prefill_s = since(t0);
    const double cpu = cpu_seconds() - c0;
    r.prefill_cpu_share = cpu / (r.prefill_s * r.threads);
    if (limits.int8_peak_per_core_cpu > 0)
      r.prefill_int8_fraction_of_cpu_time = r.prefill_int8_ops / cpu / limits.int8_peak_per_core_cpu;
    r.ttft_s = r.prefill_s;
    r.prefill_tps = o.n_prompt / r.prefill_s;
  }
  {
    // Decode: n tokens one at a time from a one-token context, greedy.
    kv::ContiguousCache cache(spec);
    model::SequenceKv* caches[] = {&cache};
    std::vector<float> logits;
    model::BatchRow row{0, 0, 2, true};
    engine->model().forward(std::span(&row, 1), caches, logits);  // position 0: not timed
    engine->model().reset_expert_counters();
    if (auto* p = engine->model().per_layer_inputs()) p->reset_stats();
    t0 = Clock::now();
    const double c0 = cpu_seconds();
    for (int i = 0; i < o.n_gen; ++i) {
      row = {0, i + 1, argmax(logits.data(), spec.vocab_size), true};
      engine->model().forward(std::span(&row, 1), caches, logits);
    }
    r.decode_s = since(t0);
    r.decode_cpu_share = (cpu_seconds() - c0) / (r.decode_s * r.threads);
    r.decode_tps = o.n_gen / r.decode_s;
    r.decode_counters = model_counters_json(engine->model());
    const model::ExpertCounters ec = engine->model().expert_counters();
    r.decode_expert_bytes_per_token = ec.bytes / uint64_t(o.n_gen);
    if (const auto* p = engine->model().per_layer_inputs()) {
      const model::PerLayerInputStats ps = p->stats();
      // Table rows read (misses, prefetches) and the embedding projection of tokens the
      // prepared-input cache did not have.
      r.decode_table_bytes_per_token = ps.table_bytes_read / uint64_t(o.n_gen);
      r.decode_bytes_per_token += (ps.hot_misses * w.per_layer_model_projection.storage_bytes()) / uint64_t(o.n_gen);
    }
    r.decode_bytes_per_token += r.decode_expert_bytes_per_token + r.decode_table_bytes_per_token;
  }
  r.peak_rss = peak_rss_bytes();
  if (limits.read_bandwidth > 0) {
    r.decode_roofline_tps = limits.read_bandwidth / double(r.decode_bytes_per_token);
    r.decode_fraction = r.decode_tps / r.decode_roofline_tps;
  }
  if (limits.int8_peak > 0) r.prefill_int8_fraction = r.prefill_int8_ops / r.prefill_s / limits.int8_peak;
  return r;
}

nlohmann::json bench_to_json(const BenchResult& r) {
  return {{"model", r.model},
          {"isa", r.isa},
          {"threads", r.threads},
          {"load_s", r.load_s},
          {"prefill", {{"tokens", r.n_prompt}, {"seconds", r.prefill_s}, {"tokens_per_s", r.prefill_tps},
                       {"ttft_s", r.ttft_s}, {"int8_ops", r.prefill_int8_ops},
                       {"fraction_of_int8_peak", r.prefill_int8_fraction}, {"cpu_share", r.prefill_cpu_share},
                       {"fraction_of_int8_peak_per_cpu_s", r.prefill_int8_fraction_of_cpu_time}}},
          {"decode", {{"tokens", r.n_gen}, {"seconds", r.decode_s}, {"tokens_per_s", r.decode_tps},
                      {"bytes_per_token", r.decode_bytes_per_token},
                      {"expert_bytes_per_token", r.decode_expert_bytes_per_token},
                      {"table_bytes_per_token", r.decode_table_bytes_per_token},
                      {"roofline_tokens_per_s", r.decode_roofline_tps},
                      {"fraction_of_bandwidth_roofline", r.decode_fraction}, {"cpu_share", r.decode_cpu_share},
                      {"counters", r.decode_counters}}},
          {"weight_bytes", r.weight_bytes},
          {"peak_rss_bytes", r.peak_rss},
          {"machine", limits_to_json(r.limits)}};
}

std::string bench_to_text(const BenchResult& r) {
  std::string s;
  s += fmt::format("model        {}\n", r.model);
  s += fmt::format("kernels      {} x {} threads\n", r.isa, r.threads);
  s += fmt::format("machine      read bandwidth {:.1f} GB/s, int8 peak {:.0f} GOPS ({})\n",
                   r.limits.read_bandwidth / 1e9, r.limits.int8_peak / 1e9, r.limits.source);
  s += fmt::format("weights      {:.3f} GB; a decode step reads {:.3f} GB\n", r.weight_bytes / 1e9,
                   r.decode_bytes_per_token / 1e9);
  s += fmt::format("load         {:.3f} s\n", r.load_s);
  s += fmt::format("pp{:<9} {:.2f} tokens/s  (ttft {:.3f} s; {:.0f} GOPS = {:.1f}% of int8 peak; cpu share {:.0f}%)\n",
                   r.n_prompt, r.prefill_tps, r.ttft_s, r.prefill_int8_ops / r.prefill_s / 1e9,
                   100 * r.prefill_int8_fraction, 100 * r.prefill_cpu_share);
  if (r.prefill_int8_fraction_of_cpu_time > 0)
    s += fmt::format("             per CPU-second: {:.1f}% of one core's int8 peak\n", 100 * r.prefill_int8_fraction_of_cpu_time);
  s += fmt::format("tg{:<9} {:.2f} tokens/s  (roofline {:.2f} tokens/s: {:.1f}% of bandwidth; cpu share {:.0f}%)\n",
                   r.n_gen, r.decode_tps, r.decode_roofline_tps, 100 * r.decode_fraction, 100 * r.decode_cpu_share);
  if (r.decode_expert_bytes_per_token)
    s += fmt::format("experts      a decode step reads {:.3f} GB of the chosen experts\n", r.decode_expert_bytes_per_token / 1e9);
  if (!r.decode_counters.is_null() && !r.decode_counters["per_layer_inputs"].is_null()) {
    const auto& p = r.decode_counters["per_layer_inputs"];
    s += fmt::format("per-layer    table bytes read per token {} (row {} B); row cache hit rate {:.1f}%, "
                     "prepared-input hit rate {:.1f}% ({})\n",
                     r.decode_table_bytes_per_token, p["table_row_bytes"].get<uint64_t>(),
                     100 * p["row_hit_rate"].get<double>(), 100 * p["hot_hit_rate"].get<double>(),
                     p["config"].get<std::string>());
  }
  s += fmt::format("peak RSS     {:.3f} GB\n", r.peak_rss / 1e9);
  return s;
}

}  // namespace lumen::runtime
