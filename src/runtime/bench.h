// `lumen bench` measurements, in the manner of llama-bench's pp/tg tests: prefill of an
// n-token prompt (tokens/s, time to first token), decode of n tokens one at a time
// (tokens/s), load time and peak RSS; and the machine limits they are compared with.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model/gemma_model.h"
#include "model/per_layer_inputs.h"

namespace lumen::runtime {

// The model's counters as JSON: per-layer input caches ("per_layer_inputs": tokens, hits,
// misses, evictions, table bytes read, rows prefetched; null without per-layer inputs) and
// the experts ("experts": bytes read, selections, rows; null without experts).
nlohmann::json model_counters_json(const model::GemmaModel& model);

struct MachineLimits {
  double read_bandwidth = 0;  // bytes/s, all threads
  double int8_peak = 0;       // int8 ops/s (multiply-add = 2), all threads, best ISA
  double int8_peak_per_core_cpu = 0;  // int8 ops per CPU-second of one thread
  int threads = 0;
  std::string isa;
  std::string source;  // "measured" or the file it came from
};

// Measures both limits with the kernel pool's threads.
MachineLimits measure_machine_limits();
nlohmann::json limits_to_json(const MachineLimits& m);
// Reads a `lumen bench --machine --json` output. Throws lumen::Error naming the file.
MachineLimits limits_from_json_file(const std::string& path);

struct BenchOptions {
  int n_prompt = 512;
  int n_gen = 128;
  uint64_t seed = 1;
  std::string quant, imatrix;  // quantize at load (Engine LoadOptions)
  model::PerLayerInputConfig per_layer_inputs;  // the table's caches (models with per-layer inputs)
};

struct BenchResult {
  std::string model, isa;
  int threads = 0;
  double load_s = 0;
  int n_prompt = 0, n_gen = 0;
  double prefill_s = 0, prefill_tps = 0, ttft_s = 0;
  double decode_s = 0, decode_tps = 0;
  // CPU time the process got during the phase / (wall time x threads): below 1 when the
  // machine is shared (other processes took the cores), so the speed is not the code's.
  double prefill_cpu_share = 0, decode_cpu_share = 0;
  uint64_t peak_rss = 0;          // bytes
  uint64_t weight_bytes = 0;      // all matrices as stored
  // Bytes one decode step reads: every dense matrix, the experts the router chose (measured
  // over the decode), the per-layer input table rows read (misses), the output projection.
  uint64_t decode_bytes_per_token = 0;
  uint64_t decode_expert_bytes_per_token = 0;  // of which experts
  uint64_t decode_table_bytes_per_token = 0;   // of which per-layer input table rows
  // Decode counters (null when the model has none): per-layer input cache hit rates, experts.
  nlohmann::json decode_counters;
  double prefill_int8_ops = 0;    // matmul ops of the prefill (2 per multiply-add)
  MachineLimits limits;
  double decode_roofline_tps = 0, decode_fraction = 0;
  double prefill_int8_fraction = 0;
  // Contention-independent efficiency: prefill int8 ops per CPU-second of the process over
  // the per-core peak per CPU-second (time other processes took from us does not count).
  double prefill_int8_fraction_of_cpu_time = 0;
};

BenchResult run_bench(const std::string& model_path, const BenchOptions& options, const MachineLimits& limits);
nlohmann::json bench_to_json(const BenchResult& r);
std::string bench_to_text(const BenchResult& r);

}  // namespace lumen::runtime
