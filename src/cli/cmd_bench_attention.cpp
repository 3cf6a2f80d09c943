// lumen bench-attention PATH [--context 1024,8192,32768] [--prefill 4096] [--kv-dtype f16]
// [--kv-cold off|f16|int8|int4]: times the attention part of the model alone (the KV cache
// and the attention kernels over every layer, with random queries, keys and values of the
// model's shapes), without weights: decode at each context and a chunked prefill. With
// --model (a loaded model, e.g. a synthetic packed 12B), the whole forward step instead:
// the cache is filled with random rows up to the context (what a prefill would leave, at
// a fraction of its cost), then decode steps and prefill chunks run through the model. It
// measures; it checks nothing.
#include <chrono>
#include <ctime>
#include <cmath>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>

#include "base/error.h"
#include "cli/command.h"
#include "cli/model_flags.h"
#include "kernels/thread_pool.h"
#include "kv/kv_config.h"
#include "kv/paged_cache.h"
#include "model/attention.h"
#include "runtime/engine.h"
#include "spec/model_spec.h"

namespace {

struct AttentionBenchOptions {
  std::string path;
  std::string contexts = "1024,8192,32768";
  int prefill = 4096;
  int chunk = 256;
  int repeats = 5;
  std::string kv_dtype = "f16";
  std::string kv_cold = "off";
  int hot_window = 1024;
  int page_size = 256;
  bool model = false;
};

using Clock = std::chrono::steady_clock;

// Unit-RMS random rows (the real keys are RMS-normed too), a few distinct ones cycled.
struct RowSource {
  std::vector<std::vector<float>> rows;
  size_t next = 0;
  RowSource(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd;
    for (int i = 0; i < 61; ++i) {
      std::vector<float> r(static_cast<size_t>(n));
      for (auto& x : r) x = nd(rng);
      rows.push_back(std::move(r));
    }
  }
  const float* get() { return rows[next++ % rows.size()].data(); }
};

struct Bench {
  const lumen::spec::ModelSpec& spec;
  lumen::kv::KvConfig config;
  std::vector<RowSource> sources;
  int64_t max_q = 0;

  Bench(const lumen::spec::ModelSpec& s, lumen::kv::KvConfig c) : spec(s), config(c) {
    for (const auto& ls : spec.layers) {
      sources.emplace_back(int64_t(ls.num_kv_heads) * ls.head_dim, 17u + uint32_t(sources.size()));
      max_q = std::max<int64_t>(max_q, int64_t(ls.num_q_heads) * ls.head_dim);
    }
  }

  // Stores positions [from, to) of every layer, as the graph would, and lets sliding layers
  // drop what their window has left.
  void fill(lumen::kv::PagedCache& cache, int32_t from, int32_t to) {
    for (int l = 0; l < spec.num_layers(); ++l) {
      for (int32_t p = from; p < to; ++p) cache.store(l, p, sources[size_t(l)].get(), sources[size_t(l)].get());
      const int w = spec.layers[size_t(l)].window;
      if (w > 0) cache.release_before(l, to - 1 - w + 2);
    }
  }

  // One forward step's attention over all layers for rows at positions [from, to).
  void attend_all(lumen::kv::PagedCache& cache, int32_t from, int32_t to, std::vector<float>& q, std::vector<float>& out) {
    std::vector<lumen::model::BatchRow> rows;
    for (int32_t p = from; p < to; ++p) rows.push_back({0, p, 0, false});
    lumen::model::SequenceKv* caches[] = {&cache};
    const size_t need = size_t(int64_t(rows.size()) * max_q);
    if (q.size() < need) {
      std::mt19937 rng(5);
      std::normal_distribution<float> nd;
      q.resize(need);
      for (auto& x : q) x = nd(rng);
      out.resize(need);
    }
    for (int l = 0; l < spec.num_layers(); ++l) {
      const auto& ls = spec.layers[size_t(l)];
      lumen::model::attend(ls, spec.attention_scale, spec.attn_logit_softcap ? *spec.attn_logit_softcap : 0.0f, l,
                           rows, caches, q.data(), out.data());
    }
  }
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// CPU seconds of the whole process (all threads): robust on a machine whose cores are shared.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Whole forward steps of a loaded model over a cache filled with random rows.
int run_model(const AttentionBenchOptions& o, const lumen::runtime::Engine& engine, const lumen::kv::KvConfig& c,
              const std::vector<int32_t>& contexts) {
  const lumen::spec::ModelSpec& spec = engine.spec();
  Bench bench(spec, c);
  std::vector<float> logits;
  std::printf("whole model (%d layers, %s, %d threads)\n", spec.num_layers(), lumen::kv::kv_config_to_text(c).c_str(),
              lumen::kernels::ThreadPool::global().size());
  auto step = [&](lumen::kv::PagedCache& cache, int32_t from, int32_t to, double& wall, double& cpu) {
    std::vector<lumen::model::BatchRow> rows;
    for (int32_t p = from; p < to; ++p) rows.push_back({0, p, int32_t(7 + p % 1000), p + 1 == to});
    lumen::model::SequenceKv* caches[] = {&cache};
    const auto t = Clock::now();
    const double c0 = cpu_seconds();
    engine.model().forward(rows, caches, logits);
    cpu = cpu_seconds() - c0;
    wall = seconds_since(t);
  };
  for (int32_t ctx : contexts) {
    if (ctx < 1) throw lumen::Error("--context: contexts must be positive");
    lumen::kv::PagedCache cache(spec, c, nullptr, int64_t(ctx) + 1);
    bench.fill(cache, 0, ctx);
    double wall = 0, cpu = 0, w, u;
    step(cache, ctx, ctx + 1, w, u);  // warm-up (pages the weights in)
    for (int r = 0; r < o.repeats; ++r) {
      step(cache, ctx, ctx + 1, w, u);
      wall += w;
      cpu += u;
    }
    std::printf("decode  context %6d: wall %8.1f ms/token, %6.2f tokens/s; CPU %8.1f ms/token\n", ctx,
                1e3 * wall / o.repeats, o.repeats / wall, 1e3 * cpu / o.repeats);
    std::fflush(stdout);
  }
  if (o.prefill > 0) {
    // The first and the last chunk of the prompt; attention grows linearly over the chunks
    // between, the rest of a chunk's cost is constant, so their mean times the number of
    // chunks is the prompt's prefill time.
    const int32_t chunk = std::min(o.chunk, o.prefill);
    double wall[2], cpu[2];
    const int32_t offsets[2] = {0, o.prefill - chunk};
    for (int i = 0; i < 2; ++i) {
      lumen::kv::PagedCache cache(spec, c, nullptr, o.prefill);
      bench.fill(cache, 0, offsets[i]);
      step(cache, offsets[i], offsets[i] + chunk, wall[i], cpu[i]);
    }
    const double chunks = double(o.prefill) / chunk;
    const double total_wall = chunks * (wall[0] + wall[1]) / 2, total_cpu = chunks * (cpu[0] + cpu[1]) / 2;
    std::printf("prefill chunk of %d at offset 0: wall %.2f s (CPU %.2f s); at offset %d: wall %.2f s (CPU %.2f s)\n",
                chunk, wall[0], cpu[0], offsets[1], wall[1], cpu[1]);
    std::fflush(stdout);
    std::printf("prefill %d tokens (from those two chunks): wall %.1f s, %.2f tokens/s; CPU %.1f s\n", o.prefill,
                total_wall, o.prefill / total_wall, total_cpu);
  }
  return 0;
}

LUMEN_COMMAND(95, [](CLI::App& app) {
  auto o = std::make_shared<AttentionBenchOptions>();
  auto* cmd = app.add_subcommand("bench-attention", "Time the KV cache and attention alone (random data, model shapes)");
  cmd->add_option("path", o->path, "Model directory, config.json or manifest (shapes only)")->required();
  cmd->add_option("--context", o->contexts, "Comma-separated decode contexts");
  cmd->add_option("--prefill", o->prefill, "Prompt length of the prefill measurement (0: skip)");
  cmd->add_option("--chunk", o->chunk, "Prefill chunk (rows per forward step)");
  cmd->add_option("--repeats", o->repeats, "Decode steps timed per context");
  cmd->add_option("--kv-dtype", o->kv_dtype, "f32, f16 or bf16");
  cmd->add_option("--kv-cold", o->kv_cold, "Cold tier of full layers: off, f32, f16, bf16, int8, int4");
  cmd->add_option("--hot-window", o->hot_window, "Hot positions of full layers when tiered");
  cmd->add_option("--page-size", o->page_size, "Positions per page");
  cmd->add_flag("--model", o->model, "PATH is a model to load: time whole forward steps, not attention alone");
  lumen::cli::add_exact_flag(cmd);
  return std::pair{cmd, lumen::cli::Runner([o] {
    std::unique_ptr<lumen::runtime::Engine> engine;
    if (o->model) engine = lumen::runtime::Engine::load(o->path);
    const lumen::spec::ModelSpec spec = engine ? engine->spec() : lumen::spec::load_spec(o->path);
    lumen::kv::KvConfig c;
    auto dt = lumen::kv::kv_elem_from_name(o->kv_dtype);
    if (!dt) throw lumen::Error("--kv-dtype: expected f32, f16 or bf16, got '" + o->kv_dtype + "'");
    c.dtype = *dt;
    c.page_size = o->page_size;
    c.hot_window = o->hot_window;
    if (o->kv_cold != "off") {
      auto cold = lumen::kv::kv_elem_from_name(o->kv_cold);
      if (!cold) throw lumen::Error("--kv-cold: expected off, f32, f16, bf16, int8 or int4, got '" + o->kv_cold + "'");
      c.tiering = true;
      c.cold = *cold;
    }
    if (o->chunk < 1 || o->repeats < 1) throw lumen::Error("--chunk and --repeats must be at least 1");
    const std::vector<int32_t> contexts = lumen::cli::parse_token_list(o->contexts, "--context");
    Bench bench(spec, c);
    std::vector<float> q, out;
    if (engine) return run_model(*o, *engine, c, contexts);
    std::cout << "attention only (" << spec.num_layers() << " layers, " << lumen::kv::kv_config_to_text(c) << ", "
              << lumen::kernels::ThreadPool::global().size() << " threads)\n";
    for (int32_t ctx : contexts) {
      if (ctx < 1) throw lumen::Error("--context: contexts must be positive");
      lumen::kv::PagedCache cache(spec, c, nullptr, int64_t(ctx) + 1);
      const auto t_fill = Clock::now();
      bench.fill(cache, 0, ctx);
      const double fill_s = seconds_since(t_fill);
      bench.fill(cache, ctx, ctx + 1);
      bench.attend_all(cache, ctx, ctx + 1, q, out);  // warm-up
      double best = 1e30, total = 0;
      const double cpu0 = cpu_seconds();
      for (int r = 0; r < o->repeats; ++r) {
        const auto t = Clock::now();
        bench.attend_all(cache, ctx, ctx + 1, q, out);
        const double s = seconds_since(t);
        best = std::min(best, s);
        total += s;
      }
      const double cpu = (cpu_seconds() - cpu0) / o->repeats;
      std::printf("decode  context %6d: wall %8.3f ms/token (best %.3f), %7.1f tokens/s; CPU %8.3f ms/token "
                  "(%.1f tokens/s per core); cache %.1f MiB (filled in %.1f s)\n",
                  ctx, 1e3 * total / o->repeats, 1e3 * best, o->repeats / total, 1e3 * cpu, 1.0 / cpu,
                  double(cache.bytes()) / (1 << 20), fill_s);
      std::fflush(stdout);
    }
    if (o->prefill > 0) {
      lumen::kv::PagedCache cache(spec, c, nullptr, o->prefill);
      double attn_s = 0, store_s = 0, attn_cpu = 0;
      for (int32_t from = 0; from < o->prefill; from += o->chunk) {
        const int32_t to = std::min(o->prefill, from + o->chunk);
        auto t = Clock::now();
        // The graph stores a chunk's rows, attends, then releases: keep that order.
        for (int l = 0; l < spec.num_layers(); ++l)
          for (int32_t p = from; p < to; ++p)
            cache.store(l, p, bench.sources[size_t(l)].get(), bench.sources[size_t(l)].get());
        store_s += seconds_since(t);
        t = Clock::now();
        const double c0 = cpu_seconds();
        bench.attend_all(cache, from, to, q, out);
        attn_cpu += cpu_seconds() - c0;
        attn_s += seconds_since(t);
      }
      std::printf("prefill %6d tokens in chunks of %d: attention wall %.3f s (%.1f tokens/s), CPU %.3f s "
                  "(%.1f tokens/s per core); cache writes %.3f s\n",
                  o->prefill, o->chunk, attn_s, o->prefill / attn_s, attn_cpu, o->prefill / attn_cpu, store_s);
    }
    return 0;
  })};
});

}  // namespace
