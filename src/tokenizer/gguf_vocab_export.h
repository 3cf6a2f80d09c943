// A Hugging Face Gemma 4 tokenizer (tokenizer.json, tokenizer_config.json, config.json in one
// directory) written as the tokenizer.* metadata llama.cpp's converter gives a gemma4 GGUF
// (Gemma4Model.set_vocab: gguf-py's LlamaHfVocab and SpecialVocab), so that `lumen quantize`
// writes a checkpoint's vocabulary exactly as a GGUF made by llama.cpp carries it.
#pragma once

#include <cstdint>
#include <string>

#include "formats/gguf_writer.h"

namespace lumen::tokenizer {

// Adds tokenizer.ggml.model ("gemma4"), tokens, scores, token types, merges, the special ids,
// the add_bos/add_eos/add_sep flags, tokenizer.chat_template and add_space_prefix to `md`.
// Returns the converter's count of vocabulary rows (entries of the BPE vocabulary plus added
// tokens): the embedding keeps at most that many rows. Throws lumen::Error naming the file
// and field at fault (no tokenizer.json, not a byte-fallback BPE, an id out of order ...).
int64_t add_gemma4_vocab_to_gguf(const std::string& dir, formats::GgufMetadata& md);

}  // namespace lumen::tokenizer
