// lumen bench-sampler [--vocab 262144] [--iterations 200]: time of one sampling step (bias,
// penalties, truncation, draw) on random logits, per configuration. Measures only.
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "cli/command.h"
#include "runtime/sampler.h"

namespace {

struct SamplerBenchOptions {
  int vocab = 262144;
  int iterations = 200;
};

LUMEN_COMMAND(90, [](CLI::App& app) {
  auto o = std::make_shared<SamplerBenchOptions>();
  auto* cmd = app.add_subcommand("bench-sampler", "Time one sampling step on random logits");
  cmd->add_option("--vocab", o->vocab, "Vocabulary size")->check(CLI::PositiveNumber);
  cmd->add_option("--iterations", o->iterations, "Steps per configuration")->check(CLI::PositiveNumber);
  return std::pair{cmd, lumen::cli::Runner([o] {
    using namespace lumen::runtime;
    std::mt19937 rng(1);
    std::normal_distribution<float> logit(0.0f, 3.0f);  // the spread of a real model's logits
    std::vector<float> base(size_t(o->vocab));
    for (auto& x : base) x = logit(rng);
    std::vector<int32_t> generated(500);
    for (auto& g : generated) g = int32_t(rng() % uint32_t(o->vocab));

    std::vector<float> work(base.size());
    auto copy_only = [&] {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < o->iterations; ++i) work = base;
      return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / o->iterations;
    }();
    auto bench = [&](const char* name, SamplingParams p) {
      Sampler sampler(p, o->vocab);
      int64_t checksum = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < o->iterations; ++i) {
        work = base;
        checksum += sampler.sample(work, generated);
      }
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / o->iterations;
      fmt::print("{:<44} {:8.3f} ms/token  (checksum {})\n", name, ms - copy_only, checksum);
    };
    fmt::print("vocabulary {}, {} steps each, the logits copy ({:.3f} ms) subtracted\n", o->vocab, o->iterations,
               copy_only);
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    bench("greedy", greedy);
    bench("model defaults: T 1, top-k 64, top-p 0.95", default_sampling());
    SamplingParams penalties = default_sampling();
    penalties.repetition_penalty = 1.1f;
    penalties.presence_penalty = 0.5f;
    penalties.frequency_penalty = 0.5f;
    bench("defaults + 3 penalties over 500 generated", penalties);
    SamplingParams top_p;
    top_p.top_p = 0.95f;
    bench("top-p 0.95 alone (whole vocabulary)", top_p);
    SamplingParams min_p;
    min_p.min_p = 0.05f;
    bench("min-p 0.05 alone", min_p);
    bench("T 1, no truncation", SamplingParams{});
    return 0;
  })};
});

}  // namespace
