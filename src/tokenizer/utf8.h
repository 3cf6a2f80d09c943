// UTF-8 helpers shared by the tokenizers: validation with the offset of the first bad byte,
// code point iteration, and the "complete prefix" split the stream decoder needs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace lumen::tokenizer::utf8 {

// Length of the well-formed sequence starting at text[pos] (1-4), or 0 when the bytes there
// are not one (bad lead byte, bad continuation, overlong form, surrogate, > U+10FFFF, or cut
// short by the end of the text).
size_t sequence_length(std::string_view text, size_t pos);

// Offset of the first byte that does not start a well-formed sequence; nullopt when valid.
std::optional<size_t> first_invalid(std::string_view text);

// Throws lumen::Error "WHAT: invalid UTF-8 at byte N" when `text` is not valid UTF-8.
void require_valid(std::string_view text, const std::string& what);

// Decodes the sequence of `length` bytes at text[pos] (already known to be well formed).
char32_t decode(std::string_view text, size_t pos, size_t length);
void append(std::string& out, char32_t code_point);

// Number of bytes at the end of `bytes` that form the beginning of a well-formed sequence
// still waiting for continuation bytes (0-3).
size_t incomplete_tail(std::string_view bytes);

// `bytes` with every byte that does not belong to a well-formed sequence replaced by U+FFFD.
std::string replace_invalid(std::string_view bytes);

// Python's str.isspace() for one code point (what Jinja's `trim` strips).
bool is_python_space(char32_t code_point);
// `text` without leading and trailing Python whitespace.
std::string_view python_strip(std::string_view text);

}  // namespace lumen::tokenizer::utf8
