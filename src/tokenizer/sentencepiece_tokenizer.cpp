// SentencePiece models through Debian's libsentencepiece. The library does the model's own
// algorithm (BPE or unigram, normalization, byte fallback, user-defined pieces); this adapter
// adds what the Tokenizer interface promises on top: control pieces ("<bos>",
// "<start_of_turn>") written in the text become their ids when parse_special, and decoding
// renders them as text unless skip_special.
#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <sentencepiece_processor.h>

#include "base/error.h"
#include "formats/protobuf_wire.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace lumen::tokenizer {
namespace {

// The library trusts a model's precompiled character map (a darts-clone double array over
// UTF-8 bytes plus the replacement strings it points into): a trie transition or a value
// outside the blob reads outside the model (a fuzzed model crashed the library this way).
// This walks every state an input can reach and checks each read the library's
// commonPrefixSearch and Normalizer::NormalizePrefix would make.
void check_charsmap(std::string_view blob, const std::string& where) {
  auto fail = [&](const std::string& what) { throw Error(where + ": " + what); };
  if (blob.empty()) return;  // no normalization rules
  uint32_t trie_bytes = 0;
  if (blob.size() <= 4) fail("is " + std::to_string(blob.size()) + " bytes, shorter than its header");
  std::memcpy(&trie_bytes, blob.data(), 4);  // little-endian, as the library reads it
  blob.remove_prefix(4);
  if (trie_bytes >= blob.size())
    fail("claims a " + std::to_string(trie_bytes) + "-byte trie in " + std::to_string(blob.size()) + " bytes");
  const size_t units = trie_bytes / 4;
  const std::string_view replacements = blob.substr(trie_bytes);
  if (units == 0) fail("has an empty trie");
  auto unit = [&](size_t i) {
    uint32_t u;
    std::memcpy(&u, blob.data() + 4 * i, 4);
    return u;
  };
  // darts-clone's unit layout: label (low byte, with bit 31), has-leaf bit 8, offset above bit 10.
  auto label = [](uint32_t u) { return u & ((1u << 31) | 0xffu); };
  auto has_leaf = [](uint32_t u) { return ((u >> 8) & 1u) != 0; };
  auto offset = [](uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); };
  std::vector<bool> seen(units, false);
  std::vector<size_t> todo;
  auto visit = [&](uint64_t base) {
    // Every byte c of the input reads the unit at base ^ c: all 256 must lie inside the trie.
    if ((base | 0xffu) >= units) fail("has a trie transition outside its " + std::to_string(units) + " units");
    if (!seen[size_t(base)]) {
      seen[size_t(base)] = true;
      todo.push_back(size_t(base));
    }
  };
  visit(offset(unit(0)));
  while (!todo.empty()) {
    const size_t base = todo.back();
    todo.pop_back();
    for (uint32_t c = 0; c < 256; ++c) {
      const uint32_t u = unit(base ^ c);
      if (label(u) != c) continue;
      const uint64_t next = (base ^ c) ^ offset(u);
      if (has_leaf(u)) {
        if (next >= units) fail("has a trie value outside its " + std::to_string(units) + " units");
        const uint32_t value = unit(size_t(next)) & ((1u << 31) - 1);
        // The replacement is read as a NUL-terminated string from that position.
        if (value >= replacements.size() || replacements.find('\0', value) == std::string_view::npos)
          fail("has a replacement at byte " + std::to_string(value) + " outside its " +
               std::to_string(replacements.size()) + " bytes of NUL-terminated strings");
      }
      visit(next);
    }
  }
}

// The normalizer_spec (3) and denormalizer_spec (5) of a ModelProto, each's precompiled_charsmap (2).
void check_normalizers(std::string_view proto, const std::string& source) {
  formats::pb::Reader model(proto, source + ": not a SentencePiece model");
  while (!model.done()) {
    const formats::pb::Field f = model.next();
    if ((f.number != 3 && f.number != 5) || f.type != formats::pb::WireType::Len) continue;
    const std::string spec = f.number == 3 ? "normalizer_spec" : "denormalizer_spec";
    formats::pb::Reader inner(f.bytes, source + ": " + spec);
    while (!inner.done()) {
      const formats::pb::Field g = inner.next();
      if (g.number == 2 && g.type == formats::pb::WireType::Len)
        check_charsmap(g.bytes, source + ": " + spec + ".precompiled_charsmap");
    }
  }
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::string_view proto, const std::string& source) : source_(source) {
    if (proto.empty()) throw Error(source + ": empty file, not a SentencePiece model");
    check_normalizers(proto, source);
    sentencepiece::util::Status status;
    try {
      status = processor_.LoadFromSerializedProto(std::string(proto));
    } catch (const std::exception& e) {
      // The library's trie builder throws on some malformed models (a zero-length piece).
      throw Error(source + ": not a SentencePiece model (" + printable(e.what()) + ")");
    }
    if (!status.ok() || processor_.GetPieceSize() <= 0)
      throw Error(source + ": not a SentencePiece model (" + printable(status.ToString()) + ")");
    const int size = processor_.GetPieceSize();
    special_.assign(size_t(size), false);
    for (int id = 0; id < size; ++id) {
      if (processor_.IsControl(id) || processor_.IsUnknown(id)) {
        special_[size_t(id)] = true;
        const std::string& piece = processor_.IdToPiece(id);
        // Control pieces with an empty surface (sentencepiece's default <s>, </s> have one)
        // cannot be written in text.
        if (!piece.empty() && !specials_.count(piece)) {
          specials_.emplace(piece, id);
          first_bytes_[static_cast<unsigned char>(piece[0])] = true;
          if (std::find(lengths_.begin(), lengths_.end(), piece.size()) == lengths_.end()) lengths_.push_back(piece.size());
        }
      }
    }
    // Longest first: the first match at a position is the longest one.
    std::sort(lengths_.rbegin(), lengths_.rend());
  }

  std::vector<int32_t> encode(std::string_view text, bool parse_special) const override {
    utf8::require_valid(text, "input text");
    std::vector<int32_t> ids;
    size_t start = 0, pos = 0;
    while (parse_special && pos < text.size()) {
      int32_t found = -1;
      size_t length = 0;
      if (first_bytes_[static_cast<unsigned char>(text[pos])]) {
        for (size_t n : lengths_) {
          if (pos + n > text.size()) continue;
          auto it = specials_.find(text.substr(pos, n));
          if (it != specials_.end()) {
            found = it->second;
            length = n;
            break;
          }
        }
      }
      if (found < 0) {
        ++pos;
        continue;
      }
      encode_plain(text.substr(start, pos - start), ids);
      ids.push_back(found);
      start = pos = pos + length;
    }
    encode_plain(text.substr(start), ids);
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string out;
    std::vector<int> run;
    const auto flush = [&] {
      if (run.empty()) return;
      std::string text;
      const auto status = processor_.Decode(run, &text);
      if (!status.ok()) throw Error(source_ + ": cannot decode (" + printable(status.ToString()) + ")");
      out += text;
      run.clear();
    };
    for (int32_t id : ids) {
      check_id(id);
      if (special_[size_t(id)]) {
        flush();
        if (!skip_special) out += processor_.IdToPiece(id);
      } else {
        run.push_back(id);
      }
    }
    flush();
    return out;
  }

  std::string token_bytes(int32_t id) const override {
    check_id(id);
    const std::string& piece = processor_.IdToPiece(id);
    if (processor_.IsByte(id) && piece.size() == 6) return std::string(1, char(std::stoi(piece.substr(3, 2), nullptr, 16)));
    if (special_[size_t(id)]) return piece;
    std::string out;
    for (size_t pos = 0; pos < piece.size();) {
      if (piece.compare(pos, 3, "\xe2\x96\x81") == 0) {
        out += ' ';
        pos += 3;
      } else {
        out += piece[pos++];
      }
    }
    return out;
  }

  std::string piece(int32_t id) const override {
    check_id(id);
    return processor_.IdToPiece(id);
  }
  std::optional<int32_t> piece_id(std::string_view piece) const override {
    const int id = processor_.PieceToId(std::string(piece));
    if (id < 0 || id >= processor_.GetPieceSize()) return std::nullopt;
    // PieceToId answers unk_id for unknown pieces.
    if (id == processor_.unk_id() && processor_.IdToPiece(id) != piece) return std::nullopt;
    return id;
  }
  int32_t vocab_size() const override { return processor_.GetPieceSize(); }
  bool is_special(int32_t id) const override { return id >= 0 && size_t(id) < special_.size() && special_[size_t(id)]; }
  int32_t bos_id() const override { return processor_.bos_id(); }
  int32_t eos_id() const override { return processor_.eos_id(); }
  int32_t pad_id() const override { return processor_.pad_id(); }
  std::string kind() const override { return "sentencepiece"; }

 private:
  void check_id(int32_t id) const {
    if (id < 0 || id >= processor_.GetPieceSize())
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" +
                  std::to_string(processor_.GetPieceSize()) + " entries)");
  }
  void encode_plain(std::string_view text, std::vector<int32_t>& ids) const {
    if (text.empty()) return;
    std::vector<int> out;
    const auto status = processor_.Encode(std::string(text), &out);
    if (!status.ok()) throw Error(source_ + ": cannot encode (" + printable(status.ToString()) + ")");
    ids.insert(ids.end(), out.begin(), out.end());
  }

  std::string source_;
  sentencepiece::SentencePieceProcessor processor_;
  std::vector<bool> special_;
  std::unordered_map<std::string_view, int32_t> specials_;  // control piece text -> id (views into processor_)
  std::array<bool, 256> first_bytes_{};
  std::vector<size_t> lengths_;  // distinct lengths of specials_, longest first
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_bytes(std::string_view proto_bytes, const std::string& source) {
  return std::make_unique<SentencePieceTokenizer>(proto_bytes, source);
}

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& model_path) {
  std::ifstream in(model_path, std::ios::binary);
  if (!in) throw Error(model_path + ": cannot open the SentencePiece model");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return load_sentencepiece_bytes(buffer.str(), model_path);
}

}  // namespace lumen::tokenizer
