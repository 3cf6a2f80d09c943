#include "runtime/bench_prefill.h"

#include <chrono>
#include <functional>
#include <random>

#include <fmt/format.h>

#include "kernels/cpu_features.h"
#include "kernels/prefill.h"
#include "kernels/thread_pool.h"
#include "quant/repack.h"
#include "runtime/bench_kernels.h"

namespace lumen::runtime {

std::vector<PrefillBenchRow> run_prefill_kernel_bench(int tokens, double min_seconds) {
  using kernels::Isa;
  // 12B shapes: hidden 3840; q 4096 rows, k/v 2048 each; FFN 15360.
  const int64_t H = 3840, F = 15360, T = tokens;
  struct Shape {
    const char* name;
    std::vector<int64_t> rows;
    int64_t cols;
  };
  const Shape shapes[] = {{"q/k/v 4096+2048+2048 x 3840", {4096, 2048, 2048}, H},
                          {"gate/up 2 x 15360 x 3840", {F, F}, H},
                          {"down 3840 x 15360", {H}, F}};
  std::vector<PrefillBenchRow> rows;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (const Shape& s : shapes) {
    std::vector<std::vector<std::byte>> data;
    std::vector<quant::WeightMatrix> ws;
    std::vector<std::vector<float>> ys;
    double ops = 0;
    for (int64_t n : s.rows) {
      data.push_back(random_q4x4_weights(n, s.cols, uint64_t(n + s.cols)));
      ys.emplace_back(size_t(n * T));
      ops += 2.0 * double(n) * double(s.cols) * double(T);
    }
    for (size_t i = 0; i < s.rows.size(); ++i)
      ws.push_back({quant::WeightFormat::Q4_0X4, s.rows[i], s.cols, data[i].data()});
    std::vector<float> x(size_t(T * s.cols));
    for (auto& e : x) e = nd(rng);
    for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
      if (!kernels::cpu_supports(isa)) continue;
      for (bool r16 : {false, true}) {
        const kernels::PrefillKernel* k =
            kernels::prefill_kernel(quant::WeightFormat::Q4_0X4, isa, r16 ? T : 2, kernels::Q8Activations::Int8);
        std::vector<const quant::WeightMatrix*> wp;
        std::vector<float*> yp;
        std::vector<const kernels::PrefillKernel*> kp;
        for (size_t i = 0; i < ws.size(); ++i) {
          wp.push_back(&ws[i]);
          yp.push_back(ys[i].data());
          kp.push_back(k);
        }
        auto call = [&] { kernels::prefill_matmul_with(x.data(), T, wp, yp, kp, isa); };
        call();  // warm-up
        int calls = 0;
        const auto t0 = std::chrono::steady_clock::now();
        const double c0 = process_cpu_seconds();
        double wall = 0;
        do {
          call();
          ++calls;
          wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        } while (calls < 2 || wall < min_seconds);
        rows.push_back({fmt::format("{}, T={}, {} ({} x{})", s.name, T, k->name, kernels::isa_name(isa),
                                    kernels::ThreadPool::global().size()),
                        ops, wall / calls, (process_cpu_seconds() - c0) / calls});
      }
    }
  }
  return rows;
}

nlohmann::json prefill_bench_to_json(const std::vector<PrefillBenchRow>& rows) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : rows)
    j.push_back({{"kernel", r.name}, {"int8_ops", r.ops}, {"wall_s", r.wall_s}, {"cpu_s", r.cpu_s},
                 {"gops_wall", r.ops / r.wall_s / 1e9}, {"gops_per_cpu_s", r.ops / r.cpu_s / 1e9}});
  return j;
}

std::string prefill_bench_to_text(const std::vector<PrefillBenchRow>& rows) {
  std::string s = fmt::format("{:<72} {:>9} {:>9} {:>11}\n", "prefill matmul", "wall ms", "GOPS", "GOPS/cpu-s");
  for (const auto& r : rows)
    s += fmt::format("{:<72} {:>9.1f} {:>9.1f} {:>11.1f}\n", r.name, r.wall_s * 1e3, r.ops / r.wall_s / 1e9,
                     r.ops / r.cpu_s / 1e9);
  return s;
}

}  // namespace lumen::runtime
