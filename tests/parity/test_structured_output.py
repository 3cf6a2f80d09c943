"""Tool calling, structured output and log-probabilities (issue 17).

- Rendering: `lumen tokenize --chat ... --render-only --chat-format gemma4` equals transformers'
  renderer (render_jinja_template, what apply_chat_template(..., tools=...) calls) with Google's
  real Gemma 4 template (tools/gemma4_tokenizer.py fetches it, with the real Gemma 4 vocabulary),
  on 12 conversations with tools.
- The server with the real `openai` client, on tiny-vocab262k (random weights, Gemma 4 graph)
  with the real Gemma 4 vocabulary: tool-call round trips (streamed and not), named and
  required tool_choice, parallel calls allowed, chat.completions.parse with a pydantic model,
  400s naming the schema path / grammar line, a dead-ending grammar's finish_reason,
  logprobs shapes (chat and completions, streamed and not), n = 2.
- The default model (Gemma 3 270M): 200 random JSON Schemas (nesting, enums, arrays, optional
  fields, formats), each answered at temperature 0 and 1 through continuous batching (8
  slots), every output parsed and validated by `jsonschema` (with its format checker).
  Outputs are short by construction (maxLength, maxItems), so max_tokens never cuts one.
"""
from __future__ import annotations

import json
import re
import random
import shutil
import sys
import threading
from pathlib import Path

import pytest
from conftest import describe, model_dir, run_lumen, work_dir

import server_support as ss

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import gemma4_tokenizer  # noqa: E402

G4 = gemma4_tokenizer.ensure()
TEMPLATE = (G4 / "google-gemma-4-31B-it.jinja").read_text(encoding="utf-8")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"},
        "limit": {"type": "integer", "description": "How many"},
        "filters": {"type": "object", "description": "Narrowing", "properties": {
            "site": {"type": "string"}, "fresh": {"type": "boolean"}}, "required": ["site"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "Zone": {"type": "string", "nullable": True}},
        "required": ["query"]}}}
NOPARAMS = {"type": "function", "function": {"name": "now", "description": "The time"}}


RFC3339_TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)")


def call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


CONVERSATIONS = [
    ([{"role": "user", "content": "Weather in Paris?"}], [WEATHER]),
    ([{"role": "system", "content": "Be brief. "}, {"role": "user", "content": "Find cats"}], [WEATHER, SEARCH]),
    ([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": None, "tool_calls": [call("c1", "get_weather", {"city": "Paris"})]},
      {"role": "tool", "tool_call_id": "c1", "content": "18 C, sunny"}], [WEATHER]),
    ([{"role": "user", "content": "Paris and Rome?"},
      {"role": "assistant", "content": None, "tool_calls": [call("a", "get_weather", {"city": "Paris", "unit": "celsius"}),
                                                            call("b", "get_weather", {"city": "Rome"})]},
      {"role": "tool", "tool_call_id": "a", "content": "18"}, {"role": "tool", "tool_call_id": "b", "content": "25"},
      {"role": "assistant", "content": "Paris 18, Rome 25."}, {"role": "user", "content": "Thanks!"}], [WEATHER]),
    ([{"role": "user", "content": "search"}], [SEARCH, NOPARAMS]),
    ([{"role": "user", "content": "time?"},
      {"role": "assistant", "content": "", "tool_calls": [call("t", "now", {})]},
      {"role": "tool", "name": "now", "content": "12:00"}], [NOPARAMS]),
    ([{"role": "user", "content": "Weather?"}], [WEATHER]),  # thinking on (see THINKING)
    ([{"role": "user", "content": "Look it up"},
      {"role": "assistant", "content": None, "reasoning_content": "I should search.",
       "tool_calls": [call("s", "search", {"query": "x", "limit": 3, "filters": {"site": "a.org", "fresh": True},
                                           "tags": ["a", "b"]})]},
      {"role": "tool", "tool_call_id": "s", "content": "{\"hits\": 0}"}], [SEARCH]),
    ([{"role": "user", "content": "Weather in Oslo?"},
      {"role": "assistant", "content": None, "tool_calls": [call("o", "get_weather", {"city": "Oslo"})]}], [WEATHER]),
    ([{"role": "user", "content": "  Ünïcödé 日本語 😀 "}], [WEATHER, NOPARAMS, SEARCH]),
    ([{"role": "system", "content": "sys"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
      {"role": "user", "content": "c"}], [SEARCH]),
    ([{"role": "user", "content": "two"},
      {"role": "assistant", "content": "Checking.", "tool_calls": [call("w", "get_weather", {"city": "Lima"})]},
      {"role": "tool", "tool_call_id": "w", "content": "warm"},
      {"role": "assistant", "content": "It is warm."}], [WEATHER]),
]
THINKING = {6}


def reference(messages, tools, generation, thinking):
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=[messages], tools=tools, chat_template=TEMPLATE,
                                        add_generation_prompt=generation, bos_token="<bos>", enable_thinking=thinking)
    return rendered[0]


def test_tool_conversations_render_as_the_real_template():
    checked = 0
    for index, (messages, tools) in enumerate(CONVERSATIONS):
        for generation in (True, False):
            thinking = index in THINKING
            expected = reference(messages, tools, generation, thinking)
            path = work_dir() / "tools" / f"conversation-{index}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"messages": messages, "tools": tools}, ensure_ascii=False), encoding="utf-8")
            flags = ["--chat", path, "--chat-format", "gemma4", "--render-only"]
            flags += [] if generation else ["--no-generation-prompt"]
            flags += ["--thinking"] if thinking else []
            cp = run_lumen("tokenize", "-m", G4 / "ggml-vocab-gemma-4.gguf", *flags)
            assert cp.returncode == 0, describe(cp)
            assert cp.stdout == expected, f"conversation {index} generation={generation}"
            checked += 1
    assert checked >= 20


# ------------------------------------------------------------------------------ the server

def gemma4_served_model() -> Path:
    """tiny-vocab262k (a Gemma 4 graph) with the real Gemma 4 vocabulary as tokenizer.gguf."""
    src = model_dir("tiny-vocab262k")
    out = work_dir() / "models" / "tiny-vocab262k-gemma4-vocab"
    stamp = f"{src.stat().st_mtime_ns} {gemma4_tokenizer.FILES['ggml-vocab-gemma-4.gguf'][1]}"
    if (out / ".stamp").exists() and (out / ".stamp").read_text() == stamp:
        return out
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, ignore=shutil.ignore_patterns(".lumen-built", "tokenizer.json", "tokenizer.model"))
    shutil.copy(G4 / "ggml-vocab-gemma-4.gguf", tmp / "tokenizer.gguf")
    (tmp / ".stamp").write_text(stamp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)
    return out


@pytest.fixture(scope="module")
def server():
    with ss.serve("--parallel", "4", model=gemma4_served_model()) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    from openai import OpenAI

    return OpenAI(base_url=server.url("/v1"), api_key="none", max_retries=0, timeout=120)


# The served model has random weights: it closes a free string only by chance (one token in
# 262144), so the tools it calls bound their strings.
def bounded(tool, lengths):
    tool = json.loads(json.dumps(tool))
    for name, n in lengths.items():
        tool["function"]["parameters"]["properties"][name]["maxLength"] = n
    return tool


WEATHER_SHORT = bounded(WEATHER, {"city": 10})
SEARCH_SHORT = bounded(SEARCH, {"query": 12, "Zone": 4})
SEARCH_SHORT["function"]["parameters"]["properties"]["tags"].update({"maxItems": 2})
SEARCH_SHORT["function"]["parameters"]["properties"]["tags"]["items"]["maxLength"] = 6
SEARCH_SHORT["function"]["parameters"]["properties"]["filters"]["properties"]["site"]["maxLength"] = 8


def validate_call(tool_call, tools):
    import jsonschema

    spec = next(t for t in tools if t["function"]["name"] == tool_call.function.name)
    args = json.loads(tool_call.function.arguments)
    jsonschema.validate(args, spec["function"].get("parameters", {"type": "object"}))
    return args


def test_tool_call_round_trip(client):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    tools = [WEATHER_SHORT, SEARCH_SHORT]
    first = client.chat.completions.create(model="x", messages=messages, tools=tools, tool_choice="required",
                                           max_tokens=300, temperature=0)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.tool_calls, choice.message
    for tc in choice.message.tool_calls:
        validate_call(tc, tools)
    messages.append(choice.message.model_dump(exclude_none=True))
    for tc in choice.message.tool_calls:
        messages.append({"role": "tool", "tool_call_id": tc.id, "content": "18 C and sunny"})
    final = client.chat.completions.create(model="x", messages=messages, tools=tools, tool_choice="none",
                                           max_tokens=8, temperature=0)
    assert final.choices[0].message.tool_calls is None
    assert isinstance(final.choices[0].message.content, str)
    assert final.choices[0].finish_reason in ("stop", "length")


def test_tool_call_round_trip_streamed(client):
    messages = [{"role": "user", "content": "Weather in Rome?"}]
    stream = client.chat.completions.create(model="x", messages=messages, tools=[WEATHER_SHORT],
                                            tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                            parallel_tool_calls=False, max_tokens=120, temperature=1, seed=3,
                                            stream=True)
    calls, finish = {}, None
    for chunk in stream:
        for c in chunk.choices:
            for tc in c.delta.tool_calls or []:
                entry = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
                entry["name"] += tc.function.name or ""
                entry["arguments"] += tc.function.arguments or ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls" and len(calls) == 1, calls
    import jsonschema

    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER_SHORT["function"]["parameters"])
    assert calls[0]["name"] == "get_weather"
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": calls[0]["id"], "type": "function", "function": {"name": "get_weather", "arguments": calls[0]["arguments"]}}]})
    messages.append({"role": "tool", "tool_call_id": calls[0]["id"], "content": "25 C"})
    text = ""
    for chunk in client.chat.completions.create(model="x", messages=messages, tools=[WEATHER_SHORT], max_tokens=6,
                                                temperature=0, stream=True):
        for c in chunk.choices:
            text += c.delta.content or ""
    assert isinstance(text, str)


def test_parse_with_a_pydantic_model(client):
    from typing import Literal

    from pydantic import BaseModel, Field

    class Weather(BaseModel):
        city: str = Field(max_length=8)
        degrees: int
        sky: Literal["sun", "rain", "snow"]
        windy: bool

    out = client.chat.completions.parse(model="x", messages=[{"role": "user", "content": "Weather?"}],
                                        response_format=Weather, max_tokens=100, temperature=0)
    parsed = out.choices[0].message.parsed
    assert isinstance(parsed, Weather), out
    assert parsed.sky in ("sun", "rain", "snow")


def test_uncompilable_schema_is_a_400_naming_the_path(client):
    import openai

    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]+$"}}}
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "s", "schema": schema, "strict": True}})
    assert "#/properties/code/pattern" in str(err.value)
    assert err.value.body["param"] == "response_format"
    bad_tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}}}
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                       tools=[bad_tool], tool_choice="required")
    assert "tools[0].function.parameters#/properties/n/minimum" in str(err.value)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                       extra_body={"grammar": "root ::= \"a"})
    assert "grammar line 1" in str(err.value) and err.value.body["param"] == "grammar"


def test_dead_end_grammar_states_its_finish_reason(server):
    # After "o" no character can follow (an empty class) and the grammar is not complete.
    body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 50, "temperature": 0,
            "grammar": "root ::= \"ok\" [^\\x00-\\U0010FFFF]"}
    status, raw, _ = server.post("/v1/chat/completions", body, timeout=120)
    assert status == 200, raw
    choice = json.loads(raw)["choices"][0]
    assert choice["finish_reason"] == "grammar_dead_end", choice
    assert "ok".startswith(choice["message"]["content"])


def test_gbnf_and_json_object(client, server):
    out = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "yes or no"}], max_tokens=10,
                                         temperature=1, seed=5, extra_body={"grammar": "root ::= (\"yes\" | \"no\") \"!\""})
    assert out.choices[0].message.content in ("yes!", "no!")
    body = {"prompt": "Data:", "max_tokens": 60, "temperature": 0, "response_format": {"type": "json_object"}}
    status, raw, _ = server.post("/v1/completions", body, timeout=120)
    choice = json.loads(raw)["choices"][0]
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(choice["text"]), dict)


def test_logprobs_shapes(client):
    out = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
                                         temperature=0, logprobs=True, top_logprobs=3)
    content = out.choices[0].logprobs.content
    assert len(content) == out.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[1].logprob >= entry.top_logprobs[2].logprob
        assert entry.token == entry.top_logprobs[0].token  # greedy takes the most likely token
    streamed = []
    for chunk in client.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], max_tokens=5,
                                                temperature=0, logprobs=True, top_logprobs=3, stream=True):
        for c in chunk.choices:
            streamed += c.logprobs.content if c.logprobs else []
    assert [e.token for e in streamed] == [e.token for e in content]
    comp = client.completions.create(model="x", prompt="Once", max_tokens=4, temperature=0, logprobs=2)
    lp = comp.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == comp.usage.completion_tokens
    assert all(len(t) <= 2 for t in lp.top_logprobs)


def prefill_tokens(server) -> int:
    status, raw, _ = server.get("/metrics")
    assert status == 200
    return int(next(line.split()[1] for line in raw.decode().splitlines()
                    if line.startswith("lumen_prefill_tokens_total ")))


def test_n_choices_share_the_prompt(client, server):
    before = prefill_tokens(server)
    out = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
                                         temperature=0, n=2)
    assert [c.index for c in out.choices] == [0, 1]
    assert out.choices[0].message.content == out.choices[1].message.content  # greedy: the same answer
    assert prefill_tokens(server) - before == out.usage.prompt_tokens, "the prompt runs once for both choices"
    assert out.usage.completion_tokens == 8
    # Sampled choices differ (seeds seed, seed+1, ...), and each is reproducible on its own.
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 1, "seed": 40, "n": 3}
    status, raw, _ = server.post("/v1/chat/completions", body, timeout=120)
    assert status == 200, raw
    texts = [c["message"]["content"] for c in json.loads(raw)["choices"]]
    assert len(set(texts)) > 1, texts
    status, raw, _ = server.post("/v1/chat/completions", dict(body, n=1, seed=41), timeout=120)
    assert json.loads(raw)["choices"][0]["message"]["content"] == texts[1]
    # Streamed: every choice's deltas carry its index, and each ends with its own finish_reason.
    parts, finished = {}, set()
    for chunk in client.chat.completions.create(model="x", messages=[{"role": "user", "content": "Hi"}], max_tokens=6,
                                                temperature=1, seed=40, n=3, stream=True):
        for c in chunk.choices:
            parts[c.index] = parts.get(c.index, "") + (c.delta.content or "")
            if c.finish_reason:
                finished.add(c.index)
    assert finished == {0, 1, 2}
    assert [parts[i] for i in range(3)] == texts


# ------------------------------------------------------------------ random schemas, default model

def random_schema(rng: random.Random, depth: int = 0) -> dict:
    kinds = ["string", "integer", "number", "boolean", "enum", "array", "object", "nullable", "format", "const"]
    if depth >= 2:
        kinds = kinds[:5] + ["format", "const"]
    kind = rng.choice(kinds)
    if kind == "string":
        return {"type": "string", "maxLength": rng.randint(1, 6)}
    if kind in ("integer", "number", "boolean"):
        return {"type": kind}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", 1, 2.5, True, None], rng.randint(1, 4))}
    if kind == "const":
        return {"const": rng.choice(["x", 7, False])}
    if kind == "format":
        return {"type": "string", "format": rng.choice(["date", "uuid", "ipv4", "time"])}
    if kind == "nullable":
        return {"anyOf": [random_schema(rng, depth + 1), {"type": "null"}]}
    if kind == "array":
        lo = rng.randint(0, 1)
        return {"type": "array", "items": random_schema(rng, depth + 1), "minItems": lo, "maxItems": lo + rng.randint(0, 2)}
    props = {f"k{i}": random_schema(rng, depth + 1) for i in range(rng.randint(1, 3))}
    return {"type": "object", "properties": props,
            "required": [k for k in props if rng.random() < 0.6], "additionalProperties": False}


def test_random_schemas_validate_on_the_default_model():
    import jsonschema

    rng = random.Random(17)
    schemas = [{"type": "object", "properties": {"a": random_schema(rng, 1), "b": random_schema(rng, 1)},
                "required": ["a"], "additionalProperties": False} for _ in range(200)]
    jobs = [(i, t) for i in range(len(schemas)) for t in (0.0, 1.0)]
    failures, lock = [], threading.Lock()
    # JSON Schema's "time" is RFC 3339's full-time (an offset is required). jsonschema's default
    # checker tests it as draft 3's HH:MM:SS, and its 2020-12 checker needs a package not
    # installed, so the RFC 3339 grammar is checked here.
    checker = jsonschema.FormatChecker()
    checker.checks("time")(lambda value: not isinstance(value, str) or RFC3339_TIME.fullmatch(value) is not None)
    with ss.serve("--parallel", "8", "--queue", "64", default_model=True) as server:
        def worker(batch):
            for i, temperature in batch:
                body = {"messages": [{"role": "user", "content": "Answer in JSON."}], "max_tokens": 200,
                        "temperature": temperature, "seed": i,
                        "response_format": {"type": "json_schema",
                                            "json_schema": {"name": f"s{i}", "schema": schemas[i], "strict": True}}}
                status, raw, _ = server.post("/v1/chat/completions", body, timeout=600)
                try:
                    assert status == 200, raw[:300]
                    choice = json.loads(raw)["choices"][0]
                    assert choice["finish_reason"] == "stop", choice
                    jsonschema.validate(json.loads(choice["message"]["content"]), schemas[i], format_checker=checker)
                except Exception as e:  # noqa: BLE001 - collected and reported together
                    with lock:
                        failures.append((i, temperature, repr(e)[:400]))

        threads = [threading.Thread(target=worker, args=(jobs[k::8],)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not failures, f"{len(failures)} of {len(jobs)} outputs failed: {failures[:5]}"
