// lumen bench -m MODEL [-p 512] [-n 128] [--json]: prefill and decode speed, TTFT, load time
// and peak RSS, as fractions of the machine's measured limits (memory read bandwidth for
// decode, int8 peak for prefill). lumen bench --machine: only the limits; save them with
// --json and pass them back with --limits FILE to skip measuring each time.
#include <memory>

#include <fmt/format.h>

#include "base/error.h"
#include "cli/command.h"
#include "cli/model_flags.h"
#include "runtime/run_config.h"
#include "runtime/bench.h"
#include "runtime/bench_kernels.h"
#include "runtime/bench_prefill.h"

namespace {

struct BenchCliOptions {
  std::string model, limits, quant, imatrix;
  int n_prompt = 512, n_gen = 128;
  bool json = false, machine = false, kernels = false, prefill_kernels = false;
  lumen::runtime::RunFlags run;  // the --ple-* flags
};

LUMEN_COMMAND(80, [](CLI::App& app) {
  auto opts = std::make_shared<BenchCliOptions>();
  auto* cmd = app.add_subcommand("bench", "Measure prefill/decode speed against the machine's limits");
  cmd->add_option("-m,--model", opts->model, "Model directory, .gguf or packed .lmp file");
  auto* prompt_opt = cmd->add_option("-p,--prompt", opts->n_prompt, "Prompt tokens to prefill (default 512)");
  cmd->add_option("-n,--gen", opts->n_gen, "Tokens to decode (default 128)");
  lumen::cli::add_quant_flags(cmd, opts->quant, opts->imatrix);
  cmd->add_option("--limits", opts->limits, "Machine limits from `lumen bench --machine --json` (else measured)");
  cmd->add_flag("--machine", opts->machine, "Only measure the machine's bandwidth and int8 peak");
  cmd->add_flag("--kernels", opts->kernels, "Only time the decode kernels on 12B-shaped matrices (GB/s)");
  cmd->add_flag("--prefill-kernels", opts->prefill_kernels,
                "Only time the prefill matmuls on 12B-shaped Q4 matrices at -p tokens (default 128 here)");
  cmd->add_flag("--json", opts->json, "Print JSON");
  lumen::cli::add_exact_flag(cmd);
  lumen::cli::add_per_layer_input_flags(cmd, opts->run);
  return std::pair{cmd, lumen::cli::Runner([opts, prompt_opt] {
    using namespace lumen::runtime;
    if (opts->machine) {
      const MachineLimits m = measure_machine_limits();
      if (opts->json) fmt::print("{}\n", limits_to_json(m).dump(2));
      else
        fmt::print("read bandwidth {:.1f} GB/s, int8 peak {:.0f} GOPS ({} x {} threads)\n", m.read_bandwidth / 1e9,
                   m.int8_peak / 1e9, m.isa, m.threads);
      return 0;
    }
    if (opts->kernels) {
      const auto rows = run_kernel_bench();
      if (opts->json) fmt::print("{}\n", kernel_bench_to_json(rows).dump(2));
      else fmt::print("{}", kernel_bench_to_text(rows));
      return 0;
    }
    if (opts->prefill_kernels) {
      const auto rows = run_prefill_kernel_bench(prompt_opt->count() > 0 ? opts->n_prompt : 128);
      if (opts->json) fmt::print("{}\n", prefill_bench_to_json(rows).dump(2));
      else fmt::print("{}", prefill_bench_to_text(rows));
      return 0;
    }
    if (opts->model.empty()) throw lumen::Error("bench: -m MODEL is required (or --machine)");
    const MachineLimits limits = opts->limits.empty() ? measure_machine_limits() : limits_from_json_file(opts->limits);
    BenchOptions bo;
    bo.n_prompt = opts->n_prompt;
    bo.n_gen = opts->n_gen;
    bo.quant = opts->quant;
    bo.imatrix = opts->imatrix;
    RunConfig run;
    apply_run_flags(run, opts->run);
    bo.per_layer_inputs = run.per_layer_inputs;
    const BenchResult r = run_bench(opts->model, bo, limits);
    if (opts->json) fmt::print("{}\n", bench_to_json(r).dump(2));
    else fmt::print("{}", bench_to_text(r));
    return 0;
  })};
});

}  // namespace
