// Collecting an importance matrix (quant/imatrix.h) as llama-imatrix does: the text's
// tokens (after a BOS) cut into chunks of ctx tokens, each chunk's first token replaced by
// BOS, every chunk run through the model from an empty cache; for every layer matrix the
// squares of its input activations summed per column over all tokens (the output
// projection is left out, as llama-imatrix leaves it by default).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "quant/imatrix.h"
#include "runtime/engine.h"

namespace lumen::runtime {

// GGUF name of a layer matrix ("blk.3.attn_q.weight"), the name an imatrix entry carries.
std::string gguf_matrix_name(int layer, model::MatrixRole role);

struct ImatrixOptions {
  int ctx = 512;       // tokens per chunk, the BOS included
  int max_chunks = 0;  // 0 = every whole chunk of the text
  std::string dataset;  // recorded in the file (the text's path)
};

// `progress(chunks_done, chunks_total)` after each chunk. Throws lumen::Error when the text
// holds less than one chunk or ctx is out of range.
quant::Imatrix collect_imatrix(const Engine& engine, std::span<const int32_t> text_tokens, const ImatrixOptions& options,
                               const std::function<void(int, int)>& progress = {});

}  // namespace lumen::runtime
