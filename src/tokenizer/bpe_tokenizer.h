// The BPE tokenizer behind both the Hugging Face tokenizer.json loader and the GGUF loader:
// a vocabulary, merges in rank order, byte fallback, added tokens matched before the model,
// and the normalizer / pre-tokenizer / decoder steps Gemma's files declare. The loaders only
// translate their file into a BpeDefinition; everything else lives here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace lumen::tokenizer {

struct AddedTokenDef {
  int32_t id = 0;
  std::string content;
  bool special = false;     // dropped by decode(skip_special); text when !parse_special
  bool normalized = false;  // matched in the normalized text instead of the raw text
  bool lstrip = false, rstrip = false, single_word = false;
};

// One normalizer step (tokenizers' Replace with a string pattern, or Prepend).
struct NormalizeStep {
  enum class Kind { Replace, Prepend } kind = Kind::Replace;
  std::string pattern, content;
};

// One pre-tokenizer step: tokenizers' Split with a string pattern.
struct SplitStep {
  enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
  std::string pattern;
  Behavior behavior = Behavior::Isolated;
};

// One decoder step, applied to the list of token strings in order.
struct DecodeStep {
  enum class Kind { Replace, ByteFallback, Fuse, Strip } kind = Kind::Fuse;
  std::string pattern, content;  // Replace; Strip: content is the stripped character
  int strip_start = 0, strip_stop = 0;
};

struct BpeDefinition {
  std::string source;  // file named in errors
  std::string kind;    // "hf-bpe", "gguf-gemma", ...
  // id -> entry of the model's vocabulary; ids of added tokens beyond it get their content.
  std::vector<std::string> vocab;
  // Merges in rank order (rank 0 first), as pairs of vocabulary entries.
  std::vector<std::pair<std::string, std::string>> merges;
  std::string merges_field = "merges";  // how errors name the list ("model.merges")
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  std::string unk_token;  // empty: none
  std::vector<AddedTokenDef> added;
  std::vector<NormalizeStep> normalizer;
  std::vector<SplitStep> pre_tokenizer;
  bool has_decoder = false;
  std::vector<DecodeStep> decoder;
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;
};

// Validates the definition (merges referring to unknown entries, duplicate ids, ...) and
// builds the tokenizer; throws lumen::Error naming `definition.source` and the item at fault.
std::unique_ptr<Tokenizer> make_bpe_tokenizer(BpeDefinition definition);

}  // namespace lumen::tokenizer
