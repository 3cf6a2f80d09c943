"""`lumen serve` with no -m serves the default model (Gemma 3 270M, Q4_K_M GGUF, installed by
scripts/setup): through the openai client a chat answer is the same greedy text `lumen run -p`
gives (the single-user path), streaming gives the same text, and requests decoded together
(continuous batching) give the same greedy text as each one alone."""
from __future__ import annotations

import threading

import pytest

import server_support as ss
from conftest import REPO, describe, run_lumen

openai = pytest.importorskip("openai")

MODEL = REPO / "models" / "gemma-3-270m-q4_k_m.gguf"
QUESTIONS = ["What is the capital of France? Answer in one word.",
             "Write one sentence about the sea.",
             "List three fruits."]


@pytest.fixture(scope="module")
def client():
    if not MODEL.is_file():
        pytest.fail(f"{MODEL} is missing: run scripts/setup (it installs the default model)")
    with ss.serve("--parallel", "3", model=None, default_model=True) as server:
        assert server.name == "gemma-3-270m-q4_k_m"
        yield openai.OpenAI(base_url=server.url("/v1"), api_key="x", max_retries=0, timeout=120)


def ask(client, question, **kw):
    return client.chat.completions.create(model="gemma", messages=[{"role": "user", "content": question}],
                                          max_tokens=24, temperature=0.0, **kw)


def test_answers_as_lumen_run_and_streams_the_same(client):
    r = ask(client, QUESTIONS[0])
    text = r.choices[0].message.content
    assert r.usage.completion_tokens >= 1 and text
    cp = run_lumen("run", "-p", QUESTIONS[0], "-n", r.usage.completion_tokens, "--temp", "0")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout.strip() == text.strip(), describe(cp)
    chunks = list(ask(client, QUESTIONS[0], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == r.choices[0].message.content


def test_batched_equals_alone(client):
    alone = [ask(client, q).choices[0].message.content for q in QUESTIONS]
    together = [None] * len(QUESTIONS)

    def run(i):
        together[i] = ask(client, QUESTIONS[i]).choices[0].message.content

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(QUESTIONS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert together == alone
