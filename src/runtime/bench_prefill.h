// `lumen bench --prefill-kernels`: the prefill matmuls alone on 12B-shaped Q4 matrices (fused
// q/k/v, fused gate/up, down) at a prompt-sized token count, for each ISA the CPU has: the
// previous 4 x 2 X4 tile and the R16 tile, both through the same driver (prefill.h). Reports
// int8 operations (2 per multiply-add) per second of wall time and per CPU-second of the
// process (what a shared machine cannot take away; compare it with the per-core-CPU-second
// int8 peak of `lumen bench --machine --json`).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lumen::runtime {

struct PrefillBenchRow {
  std::string name;
  double ops = 0;     // int8 operations per call
  double wall_s = 0;  // per call
  double cpu_s = 0;   // process CPU seconds per call (all threads)
};

std::vector<PrefillBenchRow> run_prefill_kernel_bench(int tokens = 128, double min_seconds = 1.0);
nlohmann::json prefill_bench_to_json(const std::vector<PrefillBenchRow>& rows);
std::string prefill_bench_to_text(const std::vector<PrefillBenchRow>& rows);

}  // namespace lumen::runtime
