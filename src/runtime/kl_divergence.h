// KL divergence of a model against a reference model's saved logits, with llama-perplexity's
// statistics and its file format, so either tool's base file works with either.
//
// Evaluation (llama-perplexity's): the text's tokens, after a BOS, cut into chunks of n_ctx;
// each chunk's first token replaced by BOS and run from an empty cache; the positions of the
// chunk's second half (n_ctx/2 .. n_ctx-2) are scored, each predicting the next token.
//
// The base file ("--kl-divergence-base"): "_logits_", u32 n_ctx, i32 n_vocab, i32 n_chunk,
// i32 tokens[n_ctx * n_chunk]; then per scored position nv = 2*ceil(n_vocab/2) + 4 u16:
// f32 scale, f32 min_log_prob, and each logit's log-probability as a 16-bit step above
// min_log_prob (logits more than 16 below the maximum are clamped there; the KL sum skips
// them).
//
// Statistics per scored position: the reference's and the model's -log p(next token), the
// KL divergence sum_v p_ref(v) (log p_ref(v) - log p(v)) over tokens with log p_ref > -16,
// whether the two argmaxes agree, and dp = p(next) - p_ref(next). Reported: mean PPL of both
// and their ratio and difference (with uncertainties from the per-token spread), mean KL
// and its percentiles, dp percentiles, RMS dp, and the same-top fraction.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace lumen::runtime {

struct KlBaseInfo {
  int n_ctx = 0, n_vocab = 0, n_chunk = 0;
  double ppl = 0;  // the reference model's perplexity over the scored positions
};

// Runs `engine` over the text (max_chunks 0 = every whole chunk) and writes the base file
// (temp file + rename). `progress(done, total)` after each chunk. Throws lumen::Error when
// the text holds less than one chunk or the file cannot be written.
KlBaseInfo save_kl_base(const Engine& engine, std::span<const int32_t> text_tokens, int n_ctx, int max_chunks,
                        const std::string& path, const std::function<void(int, int)>& progress = {});

struct KlStats {
  int n_ctx = 0, n_chunk = 0;
  int64_t count = 0;  // scored positions
  double ppl = 0, ppl_unc = 0, ppl_base = 0, ppl_base_unc = 0;
  double log_ppl_cor = 0;  // correlation of the two -log p series
  double log_ppl_ratio = 0, log_ppl_ratio_unc = 0;
  double ppl_ratio = 0, ppl_ratio_unc = 0, ppl_diff = 0, ppl_diff_unc = 0;
  double kld = 0, kld_unc = 0;
  double kld_max = 0, kld_99_9 = 0, kld_99 = 0, kld_95 = 0, kld_90 = 0, kld_median = 0, kld_10 = 0, kld_5 = 0,
         kld_1 = 0, kld_0_1 = 0, kld_min = 0;
  double dp = 0, dp_unc = 0;
  double dp_max = 0, dp_99_9 = 0, dp_99 = 0, dp_95 = 0, dp_90 = 0, dp_75 = 0, dp_median = 0, dp_25 = 0, dp_10 = 0,
         dp_5 = 0, dp_1 = 0, dp_0_1 = 0, dp_min = 0;
  double rms_dp = 0, rms_dp_unc = 0;
  double same_top = 0, same_top_unc = 0;
};

// Runs `engine` over the base file's tokens (max_chunks 0 = all of its chunks) and compares.
// Throws lumen::Error naming the file when it is not a base file, is truncated, or its
// vocabulary differs from the model's.
KlStats kl_divergence(const Engine& engine, const std::string& base_path, int max_chunks = 0,
                      const std::function<void(int, int)>& progress = {});

// llama-perplexity's final report, as text.
std::string kl_report(const KlStats& stats);

}  // namespace lumen::runtime
