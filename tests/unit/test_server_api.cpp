// The OpenAI request parser and response builders of the server layer (no HTTP, no model).
#include <gtest/gtest.h>

#include "server/openai_api.h"

using lumen::server::ApiError;
using lumen::server::ApiRequest;
using lumen::server::parse_chat_request;
using lumen::server::parse_completion_request;
using nlohmann::json;

namespace {

lumen::runtime::SamplingParams defaults() {
  lumen::runtime::SamplingParams d;
  d.temperature = 0.7f;
  d.top_k = 64;
  d.top_p = 0.95f;
  return d;
}

// The ApiError a body provokes (fails the test when it parses).
ApiError chat_error(const std::string& body) {
  try {
    parse_chat_request(body, defaults());
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "");
}

ApiError completion_error(const std::string& body) {
  try {
    parse_completion_request(body, defaults());
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body;
  return ApiError(0, "");
}

}  // namespace

TEST(ServerApi, ChatRequestFieldsAndDefaults) {
  const ApiRequest r = parse_chat_request(R"({
    "model": "m", "messages": [{"role": "system", "content": "be brief"},
                               {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]},
                               {"role": "assistant", "content": "hello"}, {"role": "developer", "content": "x"}],
    "max_completion_tokens": 12, "temperature": 0, "top_k": 5, "min_p": 0.1, "seed": 42,
    "stop": ["\n\n", "END"], "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "logit_bias": {"17": -100, "3": 2.5}, "n": 1, "stream": true, "stream_options": {"include_usage": true}})",
                                          defaults());
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[1].content, "hi there");
  EXPECT_EQ(r.messages[3].role, "system");  // developer is OpenAI's newer name for system
  EXPECT_EQ(r.max_tokens, 12);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.95f);  // the model default, not overridden
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.1f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(r.sampling.logit_bias.at(17), -100.0f);
  EXPECT_EQ(r.sampling.logit_bias.at(3), 2.5f);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);

  const ApiRequest plain = parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stop": "x"})", defaults());
  EXPECT_FALSE(plain.stream);
  EXPECT_FALSE(plain.seed_given);
  EXPECT_EQ(plain.max_tokens, 3);
  EXPECT_EQ(plain.stop, std::vector<std::string>{"x"});
  EXPECT_FLOAT_EQ(plain.sampling.temperature, 0.7f);
}

TEST(ServerApi, MalformedChatRequestsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
    const char* code;
  };
  const Case cases[] = {
      {"{not json", "", "invalid_json"},
      {"[1, 2]", "", "invalid_json"},
      {R"({})", "messages", "missing_required_parameter"},
      {R"({"messages": "hi"})", "messages", "invalid_type"},
      {R"({"messages": []})", "messages", "invalid_value"},
      {R"({"messages": [3]})", "messages[0]", "invalid_type"},
      {R"({"messages": [{"role": "wizard", "content": "hi"}]})", "messages[0].role", "invalid_value"},
      {R"({"messages": [{"role": 1, "content": "hi"}]})", "messages[0].role", "invalid_value"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content", "invalid_value"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content", "unsupported_value"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"})", "temperature", "invalid_type"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "temperature": 3})", "temperature", "invalid_value"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "top_p": 0})", "top_p", "invalid_value"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "top_k": 1.5})", "top_k", "invalid_type"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0})", "max_tokens", "invalid_value"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": "10"})", "max_tokens", "invalid_type"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "n": 17})", "n", "invalid_value"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})", "top_logprobs", "invalid_value"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "maybe"})", "tool_choice", "invalid_value"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "yaml"}})", "response_format.type", "invalid_value"},
      {R"({"messages": [{"role": "tool", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a b"}}]})", "tools[0].function.name", "invalid_value"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": 5, "function": {"name": "a"}}]})", "tools[0]", "invalid_value"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "stream": "yes"})", "stream", "invalid_type"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "stop": ["a","b","c","d","e"]})", "stop", "invalid_value"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "stop": [1]})", "stop", "invalid_type"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "stop": ""})", "stop", "invalid_value"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"abc": 1}})", "logit_bias", "invalid_value"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"5": 200}})", "logit_bias", "invalid_value"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "seed": "x"})", "seed", "invalid_type"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "model": 7})", "model", "invalid_type"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage", "invalid_type"},
  };
  for (const auto& c : cases) {
    const ApiError e = chat_error(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_EQ(e.code, c.code) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
  }
}

TEST(ServerApi, CompletionPrompts) {
  EXPECT_EQ(parse_completion_request(R"({"prompt": "once"})", defaults()).prompt_text, "once");
  EXPECT_EQ(parse_completion_request(R"({"prompt": ["once"]})", defaults()).prompt_text, "once");
  const ApiRequest ids = parse_completion_request(R"({"prompt": [2, 10, 11]})", defaults());
  EXPECT_TRUE(ids.prompt_is_ids);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{2, 10, 11}));
  EXPECT_EQ(completion_error(R"({})").param, "prompt");
  EXPECT_EQ(completion_error(R"({"prompt": 5})").code, "invalid_type");
  EXPECT_EQ(completion_error(R"({"prompt": ["a", "b"]})").code, "invalid_type");
  EXPECT_EQ(completion_error(R"({"prompt": [1, -2]})").code, "invalid_value");
  EXPECT_EQ(parse_completion_request(R"({"prompt": "x", "logprobs": 2})", defaults()).top_logprobs, 2);
  EXPECT_EQ(completion_error(R"({"prompt": "x", "logprobs": 21})").param, "logprobs");
  EXPECT_EQ(completion_error(R"({"prompt": "x", "echo": true})").param, "echo");
}

TEST(ServerApi, ErrorObjectAndEvents) {
  const json e = lumen::server::error_body(ApiError(400, "bad thing", "temperature", "invalid_value"));
  EXPECT_EQ(e["error"]["message"], "bad thing");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["param"], "temperature");
  EXPECT_EQ(e["error"]["code"], "invalid_value");
  const json n = lumen::server::error_body("m", "server_error", "", "");
  EXPECT_TRUE(n["error"]["param"].is_null());
  EXPECT_TRUE(n["error"]["code"].is_null());

  const std::string ev = lumen::server::sse_event(lumen::server::chat_chunk("id1", 5, "m", {{"content", "a\nb"}}, ""));
  EXPECT_EQ(ev.rfind("data: ", 0), 0u);
  EXPECT_EQ(ev.substr(ev.size() - 2), "\n\n");
  EXPECT_EQ(ev.find('\n'), ev.size() - 2) << "a newline in the text must stay escaped inside one data line";
  const json chunk = json::parse(ev.substr(6));
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "a\nb");
  // Generated bytes may be invalid UTF-8; the event must still be valid JSON.
  const std::string bad = lumen::server::sse_event(lumen::server::text_chunk("id", 1, "m", "\xff", "stop"));
  EXPECT_NO_THROW(json::parse(bad.substr(6)));
  const json done = lumen::server::chat_completion("id", 1, "m", "hi", "length", {7, 2});
  EXPECT_EQ(done["usage"]["total_tokens"], 9);
  EXPECT_EQ(done["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(done["choices"][0]["message"]["role"], "assistant");
}
