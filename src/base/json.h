// JSON from files and requests we do not trust. nlohmann's parser itself is iterative, but
// dump(), copies, comparisons and every walk of ours over a document recurse once per level:
// a 1 MB body of "[[[[..." would overflow the stack. parse_json() refuses nesting deeper
// than any real config, manifest, tokenizer or request needs.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

namespace lumen {

// Deepest nesting accepted: real documents stay under 10 levels.
inline constexpr int kMaxJsonDepth = 64;

namespace detail {

// nlohmann's DOM builder with a depth count; past `max_depth` it throws a parse_error
// (id 101, as for any other malformed document) so existing handlers report it.
class DepthLimitedSax : public nlohmann::detail::json_sax_dom_parser<nlohmann::json> {
 public:
  DepthLimitedSax(nlohmann::json& root, int max_depth)
      : nlohmann::detail::json_sax_dom_parser<nlohmann::json>(root, true), max_depth_(max_depth) {}
  bool start_object(std::size_t n) { return enter() && json_sax_dom_parser::start_object(n); }
  bool start_array(std::size_t n) { return enter() && json_sax_dom_parser::start_array(n); }
  bool end_object() { --depth_; return json_sax_dom_parser::end_object(); }
  bool end_array() { --depth_; return json_sax_dom_parser::end_array(); }
  // The parser reports a number too large for a double ("1e999") as out_of_range 406; every
  // reader and the server handle parse_error, so it becomes one (a malformed document).
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& ex) {
    if constexpr (std::is_same_v<Exception, nlohmann::json::parse_error>)
      throw ex;
    else
      throw nlohmann::json::parse_error::create(101, position, "number out of range: '" + token + "'", nullptr);
  }

 private:
  bool enter() {
    if (++depth_ > max_depth_)
      throw nlohmann::json::parse_error::create(
          101, 0, "nested deeper than " + std::to_string(max_depth_) + " levels", nullptr);
    return true;
  }
  int depth_ = 0;
  int max_depth_;
};

}  // namespace detail

// json::parse(input) (a string, string_view or istream) with nesting limited to `max_depth`;
// throws nlohmann::json::parse_error on malformed or too deeply nested input.
template <class Input>
nlohmann::json parse_json(Input&& input, int max_depth = kMaxJsonDepth) {
  nlohmann::json root;
  detail::DepthLimitedSax sax(root, max_depth);
  nlohmann::json::sax_parse(std::forward<Input>(input), &sax);
  return root;
}

}  // namespace lumen
