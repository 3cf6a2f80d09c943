#include "runtime/bench_kernels.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "kernels/block_matmul.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "kernels/qmatmul.h"
#include "kernels/qmatmul_decode.h"
#include "kernels/thread_pool.h"
#include "quant/ggml_blocks.h"
#include "quant/repack.h"
#include "quant/weight_matrix.h"

namespace lumen::runtime {
namespace {

using Clock = std::chrono::steady_clock;

// Random ggml blocks of `format` with small f16 scales in every scale field.
std::vector<std::byte> random_blocks(quant::WeightFormat format, int64_t rows, int64_t cols, uint64_t seed) {
  const auto& info = quant::format_info(format);
  std::vector<std::byte> bytes(quant::format_storage_bytes(format, rows, cols));
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(&bytes[i], &r, 8);
  }
  const uint16_t scale = quant::f32_to_f16(0.01f);
  for (size_t b = 0; b < bytes.size(); b += info.block_bytes)
    for (int16_t off : quant::ggml_block_scale_fields(info.ggml_type).offsets)
      if (off >= 0) std::memcpy(&bytes[b + size_t(off)], &scale, 2);
  return bytes;
}

// A copy of `bytes` in anonymous memory advised to use 2 MiB pages (transparent huge pages in
// "madvise" mode), to see what 4 KiB pages (file mappings) cost the stream in TLB misses.
struct HugeCopy {
  void* p = nullptr;
  size_t n = 0;
  explicit HugeCopy(const std::vector<std::byte>& bytes) : n((bytes.size() + (2u << 20) - 1) & ~size_t((2u << 20) - 1)) {
    p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      p = nullptr;
      return;
    }
    ::madvise(p, n, MADV_HUGEPAGE);
    std::memcpy(p, bytes.data(), bytes.size());
  }
  ~HugeCopy() {
    if (p) ::munmap(p, n);
  }
  HugeCopy(const HugeCopy&) = delete;
  HugeCopy& operator=(const HugeCopy&) = delete;
};

KernelBenchRow time_it(const std::string& name, double bytes, double min_seconds, const std::function<void()>& fn) {
  fn();  // warm-up
  int calls = 0;
  const auto t0 = Clock::now();
  const double c0 = process_cpu_seconds();
  double wall = 0;
  do {
    fn();
    ++calls;
    wall = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (calls < 3 || wall < min_seconds);
  return {name, bytes, wall / calls, (process_cpu_seconds() - c0) / calls};
}

}  // namespace

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

std::vector<std::byte> random_q4x4_weights(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<std::byte> bytes(quant::format_storage_bytes(quant::WeightFormat::Q4_0X4, rows, cols));
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= bytes.size(); i += 8) {
    const uint64_t r = rng();
    std::memcpy(&bytes[i], &r, 8);
  }
  const uint16_t scale = quant::f32_to_f16(0.01f);
  for (size_t c = 0; c < bytes.size(); c += quant::kQ4x4ChunkBytes)
    for (int s = 0; s < 16; ++s) std::memcpy(&bytes[c + size_t(s) * 2], &scale, 2);
  return bytes;
}

std::vector<KernelBenchRow> run_kernel_bench(double min_seconds) {
  using kernels::Isa;
  // 12B shapes: hidden 3840, q_proj 16 x 256 = 4096 rows, k/v 8 x 256 = 2048, FFN 15360.
  const int64_t H = 3840, NQ = 4096, NKV = 2048;
  // Enough copies that one pass (about 70 MB) does not fit the 32 MiB L3.
  constexpr int kCopies = 8;
  std::vector<std::vector<std::byte>> q, k, v;
  std::vector<quant::WeightMatrix> wq, wk, wv;
  for (int i = 0; i < kCopies; ++i) {
    q.push_back(random_q4x4_weights(NQ, H, 1 + i));
    k.push_back(random_q4x4_weights(NKV, H, 100 + i));
    v.push_back(random_q4x4_weights(NKV, H, 200 + i));
  }
  for (int i = 0; i < kCopies; ++i) {
    wq.push_back({quant::WeightFormat::Q4_0X4, NQ, H, q[size_t(i)].data()});
    wk.push_back({quant::WeightFormat::Q4_0X4, NKV, H, k[size_t(i)].data()});
    wv.push_back({quant::WeightFormat::Q4_0X4, NKV, H, v[size_t(i)].data()});
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<size_t>(H));
  for (auto& e : x) e = nd(rng);
  std::vector<float> yq(static_cast<size_t>(NQ)), yk(static_cast<size_t>(NKV)), yv(static_cast<size_t>(NKV));
  const double qbytes = double(q[0].size()), qkv_bytes = double(q[0].size() + k[0].size() + v[0].size());
  std::vector<std::unique_ptr<HugeCopy>> huge;
  std::vector<quant::WeightMatrix> wq_huge;
  for (int i = 0; i < kCopies; ++i) {
    huge.push_back(std::make_unique<HugeCopy>(q[size_t(i)]));
    wq_huge.push_back({quant::WeightFormat::Q4_0X4, NQ, H, huge.back()->p});
  }
  const int threads = kernels::ThreadPool::global().size();
  constexpr int64_t kHotRows = 256;  // 0.55 MB: stays in a 1 MiB L2
  const std::vector<std::byte> hot_data = random_q4x4_weights(kHotRows, H, 999);
  const size_t hot_bytes = hot_data.size();
  const quant::WeightMatrix hot{quant::WeightFormat::Q4_0X4, kHotRows, H, hot_data.data()};
  std::vector<KernelBenchRow> rows;
  int turn = 0;

  std::vector<Isa> isas;
  for (Isa isa : {Isa::Avx2, Isa::Avx512})
    if (kernels::cpu_supports(isa)) isas.push_back(isa);
  for (Isa isa : isas) {
    const std::string tag = fmt::format("{} x{}", kernels::isa_name(isa), threads);
    rows.push_back(time_it("q4 matvec 4096x3840, decode path (" + tag + ")", qbytes, min_seconds, [&] {
      const quant::WeightMatrix* ws[] = {&wq[size_t(turn++ % kCopies)]};
      float* ys[] = {yq.data()};
      kernels::qmatvec_q4(x.data(), ws, ys, isa);
    }));
    if (!huge.empty() && huge[0]->p) {
      rows.push_back(time_it("q4 matvec 4096x3840, decode path, 2 MiB pages (" + tag + ")", qbytes, min_seconds, [&] {
        const quant::WeightMatrix* ws[] = {&wq_huge[size_t(turn++ % kCopies)]};
        float* ys[] = {yq.data()};
        kernels::qmatvec_q4(x.data(), ws, ys, isa);
      }));
    }
    // The same kernel on one small matrix that stays in L2: its compute speed
    // without the memory (what lets it keep up with the bandwidth on the real stream).
    rows.push_back(time_it("q4 matvec 256x3840 in L2, decode path (" + tag + ")", double(hot_bytes),
                           min_seconds, [&] {
      const quant::WeightMatrix* ws[] = {&hot};
      float* ys[] = {yq.data()};
      kernels::qmatvec_q4(x.data(), ws, ys, isa);
    }));
    // The general tile kernel at T = 1 (what decode ran before the decode kernel).
    const kernels::detail::QTileFn tile = isa == Isa::Avx512 ? kernels::detail::q4_tile_avx512
                                                             : kernels::detail::q4_tile_avx2;
    std::vector<kernels::ActChunk> act(size_t(H / quant::kChunk));
    rows.push_back(time_it("q4 matvec 4096x3840, general tile (" + tag + ")", qbytes, min_seconds, [&] {
      const auto* base = static_cast<const std::byte*>(wq[size_t(turn++ % kCopies)].data);
      kernels::quantize_activations(x.data(), H, act.data(), isa);
      const kernels::ActChunk* acts[2] = {act.data(), act.data()};
      const size_t group_bytes = size_t(H / quant::kChunk) * quant::kQ4x4ChunkBytes;
      kernels::ThreadPool::global().parallel_for(NQ / 4, [&](int64_t g0, int64_t g1) {
        for (int64_t g = g0; g < g1; ++g) {
          float out[2][4];
          tile(base + size_t(g) * group_bytes, H / quant::kChunk, acts, 1, out);
          std::memcpy(&yq[size_t(g * 4)], out[0], 16);
        }
      });
    }));
    rows.push_back(time_it("q4 matvec 256x3840 in L2, general tile (" + tag + ")", double(hot_bytes), min_seconds, [&] {
      const auto* base = static_cast<const std::byte*>(hot.data);
      kernels::quantize_activations(x.data(), H, act.data(), isa);
      const kernels::ActChunk* acts[2] = {act.data(), act.data()};
      const size_t group_bytes = size_t(H / quant::kChunk) * quant::kQ4x4ChunkBytes;
      kernels::ThreadPool::global().parallel_for(kHotRows / 4, [&](int64_t g0, int64_t g1) {
        for (int64_t g = g0; g < g1; ++g) {
          float out[2][4];
          tile(base + size_t(g) * group_bytes, H / quant::kChunk, acts, 1, out);
          std::memcpy(&yq[size_t(g * 4)], out[0], 16);
        }
      });
    }));
    rows.push_back(time_it("q4 q/k/v fused, one pool call (" + tag + ")", qkv_bytes, min_seconds, [&] {
      const size_t i = size_t(turn++ % kCopies);
      const quant::WeightMatrix* ws[] = {&wq[i], &wk[i], &wv[i]};
      float* ys[] = {yq.data(), yk.data(), yv.data()};
      kernels::qmatvec_q4(x.data(), ws, ys, isa);
    }));
    rows.push_back(time_it("q4 q/k/v separate, three pool calls (" + tag + ")", qkv_bytes, min_seconds, [&] {
      const size_t i = size_t(turn++ % kCopies);
      for (auto [w, y] : {std::pair{&wq[i], yq.data()}, std::pair{&wk[i], yk.data()}, std::pair{&wv[i], yv.data()}}) {
        const quant::WeightMatrix* ws[] = {w};
        float* ys[] = {y};
        kernels::qmatvec_q4(x.data(), ws, ys, isa);
      }
    }));
  }
  // The ggml block-format kernels (block_matmul.h) through the format table: decode from
  // memory (GB/s of weights) and a 64-token prefill on an L2-sized matrix (GMAC/s).
  for (quant::WeightFormat format :
       {quant::WeightFormat::Q4_0, quant::WeightFormat::Q5_0, quant::WeightFormat::Q8_0, quant::WeightFormat::Q2_K,
        quant::WeightFormat::Q3_K, quant::WeightFormat::Q4_K, quant::WeightFormat::Q5_K, quant::WeightFormat::Q6_K,
        quant::WeightFormat::IQ4_XS}) {
    std::vector<std::vector<std::byte>> data;
    std::vector<quant::WeightMatrix> ws;
    for (int i = 0; i < kCopies; ++i) data.push_back(random_blocks(format, NQ, H, 300 + i));
    for (int i = 0; i < kCopies; ++i) ws.push_back({format, NQ, H, data[size_t(i)].data()});
    const std::string fname = quant::format_name(format);
    for (Isa isa : isas) {
      const std::string tag = fmt::format("{} x{}", kernels::isa_name(isa), threads);
      rows.push_back(time_it(fname + " matvec 4096x3840, block kernel (" + tag + ")", double(data[0].size()),
                             min_seconds, [&] {
                               kernels::block_matmul_isa(x.data(), 1, ws[size_t(turn++ % kCopies)], yq.data(), isa);
                             }));
    }
    constexpr int64_t kPrefillT = 64, kPrefillRows = 256;
    const quant::WeightMatrix hot_w{format, kPrefillRows, H, data[0].data()};
    // The same product on 1024 rows that stay in cache (L3): the kernel's arithmetic alone
    // (decode is bound by memory when this is well above the matvec's GB/s).
    const quant::WeightMatrix cached_w{format, 1024, H, data[0].data()};
    rows.push_back(time_it(fname + " matvec 1024x3840 in cache (" + kernels::isa_name(kernels::active_isa()) + ")",
                           double(quant::format_storage_bytes(format, 1024, H)), min_seconds, [&] {
                             kernels::block_matmul_isa(x.data(), 1, cached_w, yq.data(), kernels::active_isa());
                           }));
    std::vector<float> xs(size_t(kPrefillT * H)), ys(size_t(kPrefillT * kPrefillRows));
    for (auto& e : xs) e = nd(rng);
    // "bytes" here are multiply-adds, so the GB/s columns read as GMAC/s.
    rows.push_back(time_it(fname + " prefill 256x3840 x 64 tokens, GMAC (" + kernels::isa_name(kernels::active_isa()) +
                               ")",
                           double(kPrefillT * kPrefillRows * H), min_seconds, [&] {
                             kernels::block_matmul_isa(xs.data(), kPrefillT, hot_w, ys.data(), kernels::active_isa());
                           }));
  }
  // Vocabulary-sized vector ops of a decode step's end (Gemma 4: 262144 logits).
  std::vector<float> logits(262144);
  for (auto& e : logits) e = 10.0f * nd(rng);
  std::vector<float> work = logits;
  rows.push_back(time_it("softcap 262144 (scalar)", 0, min_seconds / 4, [&] {
    work = logits;
    kernels::detail::softcap_scalar(work.data(), int64_t(work.size()), 30.0f);
  }));
  rows.push_back(time_it("softcap 262144 (active ISA)", 0, min_seconds / 4, [&] {
    work = logits;
    kernels::softcap(work.data(), int64_t(work.size()), 30.0f);
  }));
  volatile int64_t sink = 0;
  rows.push_back(time_it("argmax 262144 (scalar)", 0, min_seconds / 4,
                         [&] { sink = kernels::detail::argmax_scalar(logits.data(), int64_t(logits.size())); }));
  rows.push_back(time_it("argmax 262144 (active ISA)", 0, min_seconds / 4,
                         [&] { sink = kernels::argmax(logits.data(), int64_t(logits.size())); }));
  (void)sink;
  return rows;
}

nlohmann::json kernel_bench_to_json(const std::vector<KernelBenchRow>& rows) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : rows)
    j.push_back({{"kernel", r.name}, {"bytes", r.bytes}, {"wall_s", r.wall_s}, {"cpu_s", r.cpu_s},
                 {"gbs_wall", r.gbs_wall()}, {"gbs_per_cpu_s", r.gbs_cpu()}});
  return j;
}

std::string kernel_bench_to_text(const std::vector<KernelBenchRow>& rows) {
  std::string s = fmt::format("{:<56} {:>10} {:>10} {:>9} {:>11}\n", "kernel", "wall us", "cpu us", "GB/s", "GB/cpu-s");
  for (const auto& r : rows) {
    if (r.bytes > 0)
      s += fmt::format("{:<56} {:>10.1f} {:>10.1f} {:>9.1f} {:>11.1f}\n", r.name, r.wall_s * 1e6, r.cpu_s * 1e6,
                       r.gbs_wall(), r.gbs_cpu());
    else
      s += fmt::format("{:<56} {:>10.1f} {:>10.1f}\n", r.name, r.wall_s * 1e6, r.cpu_s * 1e6);
  }
  return s;
}

}  // namespace lumen::runtime
