// The `lumen` command line: one subcommand per job. Every user error ends as a single
// "lumen: error: ..." line on stderr and exit status 1; usage errors exit 2.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "base/error.h"
#include "formats/npy.h"
#include "kernels/cpu_features.h"
#include "runtime/engine.h"
#include "spec/model_spec.h"

namespace {

using lumen::Error;

std::vector<int32_t> parse_tokens(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(start, comma - start);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    size_t used = 0;
    long value = -1;
    try {
      value = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || value < 0 || value > INT32_MAX)
      throw Error("--tokens: '" + item + "' is not a token id (expected comma-separated integers)");
    ids.push_back(int32_t(value));
    start = comma + 1;
  }
  return ids;
}

std::string ids_to_json(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lumen: Gemma inference on the CPU"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "lumen 0.1.0");

  std::string isa;
  app.add_option("--isa", isa, "Force a kernel variant (scalar, avx2); default: the best the CPU has");

  // inspect
  auto* inspect = app.add_subcommand("inspect", "Print the model spec of a model directory, config.json or manifest");
  std::string inspect_path;
  bool inspect_json = false;
  inspect->add_option("path", inspect_path, "Model directory, config.json or doppler.execution/v1 manifest")->required();
  inspect->add_flag("--json", inspect_json, "Print JSON instead of text");

  // logits
  auto* logits_cmd = app.add_subcommand("logits", "Write float32 logits [T, V] of every position to a .npy file");
  std::string model_path, tokens_text, out_path;
  logits_cmd->add_option("-m,--model", model_path, "Model directory")->required();
  logits_cmd->add_option("--tokens", tokens_text, "Comma-separated token ids")->required();
  logits_cmd->add_option("--out", out_path, "Output .npy file")->required();

  // run
  auto* run_cmd = app.add_subcommand("run", "Greedy continuation of a token sequence");
  int n_tokens = 32;
  run_cmd->add_option("-m,--model", model_path, "Model directory")->required();
  run_cmd->add_option("--tokens", tokens_text, "Comma-separated prompt token ids")->required();
  run_cmd->add_option("-n,--n-predict", n_tokens, "Number of tokens to generate")->check(CLI::NonNegativeNumber);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  try {
    if (!isa.empty()) {
      if (isa == "scalar") lumen::kernels::set_isa(lumen::kernels::Isa::Scalar);
      else if (isa == "avx2") lumen::kernels::set_isa(lumen::kernels::Isa::Avx2);
      else throw Error("--isa: unknown kernel variant '" + isa + "' (scalar, avx2)");
    }
    if (*inspect) {
      const lumen::spec::ModelSpec spec = lumen::spec::load_spec(inspect_path);
      if (inspect_json) std::cout << lumen::spec::spec_to_json(spec).dump(2) << "\n";
      else std::cout << lumen::spec::spec_to_text(spec);
      return 0;
    }
    if (*logits_cmd) {
      const auto tokens = parse_tokens(tokens_text);
      auto engine = lumen::runtime::Engine::load(model_path);
      const auto logits = engine->logits_all(tokens);
      lumen::formats::write_npy_f32(out_path, logits.data(),
                                    {int64_t(tokens.size()), int64_t(engine->spec().vocab_size)});
      return 0;
    }
    if (*run_cmd) {
      const auto tokens = parse_tokens(tokens_text);
      auto engine = lumen::runtime::Engine::load(model_path);
      const auto ids = engine->generate_greedy(tokens, n_tokens);
      std::cout << ids_to_json(ids) << std::endl;
      return 0;
    }
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    fmt::print(stderr, "lumen: error: {}\n", msg);
    return 1;
  }
  return 0;
}
