// `lumen bench --kernels`: the decode-path kernels alone, on 12B-shaped matrices larger than
// the caches (so the weights come from memory as in a real decode step): GB/s of weights
// read per wall-second and per CPU-second of the process (the latter is what a shared
// machine cannot take away), for the AVX-512 decode kernel, the general tile kernel at T = 1,
// fused and separate q/k/v, and the vocabulary-sized vector ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lumen::runtime {

struct KernelBenchRow {
  std::string name;
  double bytes = 0;        // weight bytes read per call (0 for the vector ops)
  double wall_s = 0;       // per call
  double cpu_s = 0;        // process CPU seconds per call (all threads)
  double gbs_wall() const { return wall_s > 0 ? bytes / wall_s / 1e9 : 0; }
  double gbs_cpu() const { return cpu_s > 0 ? bytes / cpu_s / 1e9 : 0; }
};

// min_seconds: time spent per row (at least 3 calls).
std::vector<KernelBenchRow> run_kernel_bench(double min_seconds = 1.0);
nlohmann::json kernel_bench_to_json(const std::vector<KernelBenchRow>& rows);
std::string kernel_bench_to_text(const std::vector<KernelBenchRow>& rows);

// CPU seconds the process has used (all threads): what a shared machine cannot take away.
double process_cpu_seconds();

// Random Q4_0X4 weight bytes with a small f16 scale in every scale field (random bytes would
// make NaN or subnormal scales): the benches' stand-in for a quantized matrix.
std::vector<std::byte> random_q4x4_weights(int64_t rows, int64_t cols, uint64_t seed);

}  // namespace lumen::runtime
