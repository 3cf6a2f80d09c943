"""`lumen serve` through the real `openai` Python client: models, chat and completions, streaming
and not, usage counts; the streamed text equals the non-streamed text for the same seed."""
from __future__ import annotations

import pytest

import server_support as ss

openai = pytest.importorskip("openai")

MESSAGES = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "Name three colours."},
    {"role": "assistant", "content": "Red, green, blue."},
    {"role": "user", "content": "And three more?"},
]


@pytest.fixture(scope="module")
def server():
    with ss.serve("--parallel", "4") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url("/v1"), api_key="unused", max_retries=0, timeout=60)


def test_models_and_health(server, client):
    models = client.models.list()
    assert [m.id for m in models.data] == [server.name]
    assert models.data[0].object == "model"
    status, body, _ = server.get("/health")
    assert status == 200 and b'"ok"' in body
    status, page, headers = server.get("/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b'id="messages"' in page and b"/v1/chat/completions" in page


def test_chat_stream_equals_non_stream(client):
    kw = dict(model="tiny", messages=MESSAGES, max_tokens=24, temperature=0.9, top_p=0.95, seed=1234)
    whole = client.chat.completions.create(**kw)
    choice = whole.choices[0]
    assert choice.message.role == "assistant"
    assert choice.finish_reason in ("stop", "length")
    assert whole.usage.prompt_tokens > 10
    assert 1 <= whole.usage.completion_tokens <= 24
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    assert whole.id.startswith("chatcmpl-") and whole.object == "chat.completion"

    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert text == choice.message.content
    assert finishes == [choice.finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert len({c.id for c in chunks}) == 1
    # The same seed gives the same text again; another seed (almost surely) another one.
    again = client.chat.completions.create(**kw)
    assert again.choices[0].message.content == choice.message.content


def test_max_tokens_and_length(client):
    r = client.chat.completions.create(model="tiny", messages=MESSAGES[:2], max_completion_tokens=3,
                                       temperature=0.0, logit_bias={"1": -100, "106": -100})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3


def test_completions_text_and_stream(client):
    kw = dict(model="tiny", prompt="Once upon a time", max_tokens=12, temperature=0.0)
    whole = client.completions.create(**kw)
    assert whole.object == "text_completion"
    assert whole.usage.completion_tokens >= 1
    streamed = list(client.completions.create(**kw, stream=True))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == whole.choices[0].text
    assert streamed[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    # A prompt of token ids: BOS + the ids of the text give the same continuation.
    ids = client.completions.create(model="tiny", prompt=[2, 12, 11, 13], max_tokens=5, temperature=0.0)
    assert ids.usage.prompt_tokens == 4


def test_stop_string_cuts_the_text(client):
    base = client.completions.create(model="tiny", prompt="The list:", max_tokens=16, temperature=0.0,
                                     logit_bias={"1": -100, "106": -100})
    text = base.choices[0].text
    assert len(text) >= 4, text
    stop = text[2:4]
    cut = client.completions.create(model="tiny", prompt="The list:", max_tokens=16, temperature=0.0,
                                    logit_bias={"1": -100, "106": -100}, stop=[stop])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == text[: text.index(stop)]


def test_openai_client_sees_api_errors(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny", messages=[{"role": "wizard", "content": "hi"}])
    assert e.value.status_code == 400
    assert "wizard" in e.value.body["message"]
    with pytest.raises(openai.BadRequestError) as e:  # n is 1..16
        client.chat.completions.create(model="tiny", messages=MESSAGES, n=17)
    assert "'n'" in e.value.body["message"] or e.value.body.get("param") == "n", e.value.body
