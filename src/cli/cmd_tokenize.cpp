// lumen tokenize -m MODEL "text" | --file F | --chat MESSAGES.json: token ids as JSON.
// lumen detokenize -m MODEL 2,105,...: the text of token ids.
// MODEL: a model directory, a tokenizer.json, a SentencePiece .model or a .gguf file.
#include <time.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json.h"
#include "cli/command.h"
#include "spec/model_spec.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using lumen::Error;

std::string read_file(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A JSON list of messages, or {"messages": [...], "tools": [...]} (the tools then go to
// *tools). Messages as transformers' chat templates take them: role, content (string or
// null), tool_calls [{id, function: {name, arguments}}], tool_call_id, name, reasoning_content.
std::vector<lumen::tokenizer::ChatMessage> read_messages(const std::string& path, std::vector<nlohmann::json>* tools) {
  nlohmann::json doc;
  try {
    doc = lumen::parse_json(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  if (doc.is_object() && doc.contains("tools") && tools)
    for (const auto& t : doc["tools"]) tools->push_back(t);
  if (doc.is_object() && doc.contains("messages")) doc = doc["messages"];
  if (!doc.is_array()) throw Error(path + ": expected a list of {\"role\", \"content\"} messages");
  std::vector<lumen::tokenizer::ChatMessage> messages;
  for (size_t i = 0; i < doc.size(); ++i) {
    const auto& m = doc[i];
    const auto bad = [&] {
      return Error(path + ": message " + std::to_string(i) + ": expected {\"role\": string, \"content\": string}");
    };
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) throw bad();
    lumen::tokenizer::ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    const bool calls = m.contains("tool_calls") && m["tool_calls"].is_array();
    if (m.contains("content") && m["content"].is_string()) msg.content = m["content"].get<std::string>();
    else if (!(calls && (!m.contains("content") || m["content"].is_null()))) throw bad();
    if (calls)
      for (const auto& c : m["tool_calls"]) {
        lumen::tokenizer::ToolCall call;
        const auto& f = c.contains("function") ? c["function"] : c;
        if (f.contains("name") && f["name"].is_string()) call.name = f["name"].get<std::string>();
        if (c.contains("id") && c["id"].is_string()) call.id = c["id"].get<std::string>();
        if (f.contains("arguments")) call.arguments = f["arguments"];
        msg.tool_calls.push_back(std::move(call));
      }
    if (m.contains("tool_call_id") && m["tool_call_id"].is_string()) msg.tool_call_id = m["tool_call_id"].get<std::string>();
    if (m.contains("name") && m["name"].is_string()) msg.name = m["name"].get<std::string>();
    for (const char* key : {"reasoning_content", "reasoning"})
      if (m.contains(key) && m[key].is_string()) msg.reasoning = m[key].get<std::string>();
    messages.push_back(std::move(msg));
  }
  return messages;
}

// Each line of `path` is a JSON value; `handle` gets it and its 1-based line number.
template <typename Handle>
void for_each_jsonl(const std::string& path, Handle handle) {
  std::istringstream lines(read_file(path));
  std::string line;
  for (size_t number = 1; std::getline(lines, line); ++number) {
    if (line.empty()) continue;
    nlohmann::json value;
    try {
      value = lumen::parse_json(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(path + ": line " + std::to_string(number) + ": not valid JSON (" + std::string(e.what()) + ")");
    }
    handle(value, number);
  }
}

struct TokenizeOptions {
  std::string model, text, file, jsonl, chat, chat_format = "auto";
  bool no_special = false, thinking = false, no_generation_prompt = false, render_only = false, stats = false;
};

LUMEN_COMMAND(30, [](CLI::App& app) {
  auto opts = std::make_shared<TokenizeOptions>();
  auto* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (JSON list; no BOS is added)");
  cmd->add_option("-m,--model", opts->model, "Model directory, tokenizer.json, SentencePiece .model or .gguf")->required();
  auto* text = cmd->add_option("text", opts->text, "Text to tokenize");
  auto* file = cmd->add_option("--file", opts->file, "Read the text from this file ('-': stdin)");
  auto* chat = cmd->add_option("--chat", opts->chat, "Format this JSON list of {role, content} messages as a chat prompt first");
  auto* jsonl = cmd->add_option("--jsonl", opts->jsonl, "Many texts: one JSON string a line; prints one id list a line");
  text->excludes(file)->excludes(chat)->excludes(jsonl);
  file->excludes(chat)->excludes(jsonl);
  chat->excludes(jsonl);
  cmd->add_flag("--no-special", opts->no_special, "Treat special-token text (\"<bos>\") as ordinary text");
  cmd->add_option("--chat-format", opts->chat_format, "auto, gemma4 or gemma3")->check(CLI::IsMember({"auto", "gemma4", "gemma3"}));
  cmd->add_flag("--thinking", opts->thinking, "Chat: enable thinking (Gemma 4)");
  cmd->add_flag("--no-generation-prompt", opts->no_generation_prompt, "Chat: do not open the model turn");
  cmd->add_flag("--render-only", opts->render_only, "Chat: print the formatted prompt text instead of ids");
  cmd->add_flag("--stats", opts->stats, "Print load and encode times, bytes, tokens and MB/s as JSON on stderr");
  return std::pair{cmd, lumen::cli::Runner([opts, text, file, chat, jsonl] {
    if (!*text && !*file && !*chat && !*jsonl) throw Error("tokenize: give a text, --file F, --jsonl F or --chat F");
    using Clock = std::chrono::steady_clock;
    const auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
    const auto load_start = Clock::now();
    std::unique_ptr<lumen::tokenizer::Tokenizer> tokenizer;
    // Rendering a chat in a named format needs no vocabulary.
    if (!(*chat && opts->render_only && opts->chat_format != "auto"))
      tokenizer = lumen::tokenizer::load_tokenizer(opts->model);
    const double load_s = seconds_since(load_start);
    size_t bytes = 0, tokens = 0;
    double encode_s = 0, encode_cpu_s = 0;
    // CPU time too: on a shared machine the wall clock also counts other processes.
    const auto cpu_now = [] {
      timespec ts{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
    };
    const auto encode = [&](const std::string& text) {
      const auto start = Clock::now();
      const double cpu_start = cpu_now();
      auto ids = tokenizer->encode(text, !opts->no_special);
      encode_cpu_s += cpu_now() - cpu_start;
      encode_s += seconds_since(start);
      bytes += text.size();
      tokens += ids.size();
      return ids;
    };
    const auto report = [&] {
      if (!opts->stats) return;
      std::cerr << nlohmann::json{{"kind", tokenizer->kind()}, {"load_s", load_s}, {"encode_s", encode_s},
                                  {"encode_cpu_s", encode_cpu_s}, {"bytes", bytes}, {"tokens", tokens},
                                  {"mb_per_s", encode_s > 0 ? double(bytes) / 1e6 / encode_s : 0.0},
                                  {"mb_per_cpu_s", encode_cpu_s > 0 ? double(bytes) / 1e6 / encode_cpu_s : 0.0}}
                       .dump()
                << std::endl;
    };
    if (*jsonl) {
      std::string out;
      for_each_jsonl(opts->jsonl, [&](const nlohmann::json& value, size_t number) {
        if (!value.is_string()) throw Error(opts->jsonl + ": line " + std::to_string(number) + ": expected a JSON string");
        out += lumen::cli::ids_to_json(encode(value.get<std::string>()));
        out += '\n';
      });
      std::cout << out << std::flush;
      report();
      return 0;
    }
    std::string input;
    if (*chat) {
      using namespace lumen::tokenizer;
      std::vector<nlohmann::json> tools;
      const auto messages = read_messages(opts->chat, &tools);
      ChatFormat format;
      if (opts->chat_format == "gemma4") format = ChatFormat::Gemma4;
      else if (opts->chat_format == "gemma3") format = ChatFormat::Gemma3;
      else {
        lumen::spec::ModelSpec no_spec;  // the tokenizer's own special tokens decide
        no_spec.source = opts->model;
        format = detect_chat_format(no_spec, *tokenizer);
      }
      ChatOptions chat_options;
      chat_options.thinking = opts->thinking;
      chat_options.add_generation_prompt = !opts->no_generation_prompt;
      chat_options.tools = tools;
      input = render_chat(format, messages, chat_options);
      if (opts->render_only) {
        std::cout << input << std::flush;
        return 0;
      }
    } else {
      input = *file ? read_file(opts->file) : opts->text;
      lumen::tokenizer::utf8::require_valid(input, *file ? (opts->file == "-" ? "stdin" : opts->file) : "input text");
    }
    const auto ids = encode(input);
    std::cout << lumen::cli::ids_to_json(ids) << std::endl;
    report();
    return 0;
  })};
});

struct DetokenizeOptions {
  std::string model, ids, jsonl;
  bool skip_special = false;
};

LUMEN_COMMAND(31, [](CLI::App& app) {
  auto opts = std::make_shared<DetokenizeOptions>();
  auto* cmd = app.add_subcommand("detokenize", "Print the text of comma-separated token ids (exactly, no newline added)");
  cmd->add_option("-m,--model", opts->model, "Model directory, tokenizer.json, SentencePiece .model or .gguf")->required();
  auto* ids = cmd->add_option("ids", opts->ids, "Comma-separated token ids");
  auto* jsonl = cmd->add_option("--jsonl", opts->jsonl, "Many id lists: one JSON list a line; prints one JSON string a line");
  ids->excludes(jsonl);
  cmd->add_flag("--skip-special", opts->skip_special, "Leave out special tokens");
  return std::pair{cmd, lumen::cli::Runner([opts, ids, jsonl] {
    if (!*ids && !*jsonl) throw Error("detokenize: give comma-separated ids or --jsonl F");
    if (*jsonl) {
      auto tokenizer = lumen::tokenizer::load_tokenizer(opts->model);
      std::string out;
      for_each_jsonl(opts->jsonl, [&](const nlohmann::json& value, size_t number) {
        std::vector<int32_t> list;
        if (value.is_array())
          for (const auto& v : value)
            if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX) list.push_back(v.get<int32_t>());
        if (!value.is_array() || list.size() != value.size())
          throw Error(opts->jsonl + ": line " + std::to_string(number) + ": expected a JSON list of token ids");
        out += nlohmann::json(tokenizer->decode(list, opts->skip_special)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out += '\n';
      });
      std::cout << out << std::flush;
      return 0;
    }
    const auto list = lumen::cli::parse_token_list(opts->ids, "ids");
    auto tokenizer = lumen::tokenizer::load_tokenizer(opts->model);
    std::cout << tokenizer->decode(list, opts->skip_special) << std::flush;
    return 0;
  })};
});

}  // namespace
