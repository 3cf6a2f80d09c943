// The chat page served at GET /: one static HTML document (inline CSS and JS, no external
// resources, no build step) that talks to /v1/chat/completions with streaming.
#pragma once

#include <string_view>

namespace lumen::server {

std::string_view chat_page_html();

}  // namespace lumen::server
