// Byte stream -> valid UTF-8 text, for token pieces that may split a character (byte-fallback
// tokens carry one raw byte each).
#pragma once

#include <string>
#include <string_view>

namespace lumen::runtime {

class Utf8Assembler {
 public:
  // Appends bytes; returns the text that is complete now. The bytes of a character still
  // being assembled are held; malformed bytes become U+FFFD.
  std::string push(std::string_view bytes);
  // Whatever is held, as U+FFFD (an incomplete character at the end).
  std::string flush();

 private:
  std::string pending_;
};

// Number of bytes of the UTF-8 sequence a lead byte starts (1..4), 0 for a byte that cannot
// start one (continuation byte or invalid lead).
int utf8_sequence_length(unsigned char lead);

}  // namespace lumen::runtime
