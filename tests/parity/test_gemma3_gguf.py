"""The default model (Gemma 3 270M, Q4_K_M GGUF from PyPI) against transformers loading the same file.

transformers dequantizes the GGUF with gguf-py, exactly as Lumen does (bit-identical blocks,
tests/unit/test_gguf.cpp and test_ggml_dequant.cpp), and runs Gemma 3 in float32 with eager
attention. The remaining differences are f32 rounding: summation order in dot products, and
transformers storing the norm gains as (w - 1) and adding 1 back (an ulp of the gain). So
logits must agree to a tight relative tolerance: max |lumen - ref| <= 1e-4 * max |ref| at
every position (measured ~1.3e-6), and greedy continuations must be identical.

The model is installed by scripts/setup at models/gemma-3-270m-q4_k_m.gguf. Loading it in
transformers takes most of the test's time (torch import and gguf-py dequantization), so the
reference results are computed once and cached in .cache/golden of the source tree, keyed by
the model file, the test inputs, the reference tool and the torch/transformers versions.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, TOOLS, _locked, describe, record, run_lumen, tokens_arg

import reference_gemma3_gguf as ref

MODEL = REPO / "models" / "gemma-3-270m-q4_k_m.gguf"
REL_TOL = 1e-4

TEXT_PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "In the beginning God created the heaven and the earth. And the earth was without form, and void;"
    " and darkness was upon the face of the deep.",
    "Les sciences naturelles étudient la nature: 1 + 1 = 2, H₂O, 3.14159…",
]

CHAT_QUESTIONS = [
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about the sea.",
    "List three prime numbers.",
    "Translate 'good morning' into Spanish.",
]


LONG_TEXT = " ".join(f"Item {i} is the number {i * 7 % 100}." for i in range(90))
GREEDY_N = 64
LONG_N = 8


@pytest.fixture(scope="module")
def model_file() -> Path:
    if not MODEL.is_file():
        pytest.fail(f"{MODEL} is missing: run scripts/setup (it installs the default model)")
    return MODEL


def _compute_golden(model_file: Path) -> dict:
    model, tok = ref.load(model_file), ref.tokenizer(model_file)
    g: dict = {}
    for i, text in enumerate(TEXT_PROMPTS):
        ids = [tok.bos_token_id] + tok(text, add_special_tokens=False).input_ids
        g[f"text{i}_ids"] = np.array(ids)
        g[f"text{i}_logits"] = ref.logits(model, ids)
    for i, q in enumerate(CHAT_QUESTIONS):
        ids = ref.chat_prompt_ids(tok, q)
        g[f"chat{i}_ids"] = np.array(ids)
        g[f"chat{i}_greedy"] = np.array(ref.greedy(model, ids, GREEDY_N))
        g[f"chat{i}_text"] = np.array(tok.decode(g[f"chat{i}_greedy"].tolist()))
    ids = [tok.bos_token_id] + tok(LONG_TEXT, add_special_tokens=False).input_ids
    g["long_ids"] = np.array(ids)
    g["long_greedy"] = np.array(ref.greedy(model, ids, LONG_N))
    return g


@pytest.fixture(scope="module")
def golden(model_file) -> dict:
    inputs = repr((TEXT_PROMPTS, CHAT_QUESTIONS, LONG_TEXT, GREEDY_N, LONG_N))
    return _cached("gemma3-270m", model_file, inputs, lambda: _compute_golden(model_file))


def _cached(name: str, model_file: Path, inputs: str, compute) -> dict:
    """compute() once per (model file, inputs, reference tool, torch/transformers versions)."""
    import torch
    import transformers

    h = hashlib.sha256()
    st = model_file.stat()
    h.update(f"{model_file.resolve()} {st.st_size} {st.st_mtime_ns}".encode())
    h.update(inputs.encode())
    h.update((TOOLS / "reference_gemma3_gguf.py").read_bytes())
    h.update(f"{torch.__version__} {transformers.__version__}".encode())
    # In the source tree's .cache (ignored by git), so the Release and sanitizer builds share it.
    path = REPO / ".cache" / "golden" / f"{name}-{h.hexdigest()[:16]}.npz"
    with _locked(path.parent / f".{name}.lock"):
        if not path.exists():
            tmp = path.with_suffix(f".tmp{id(path)}.npz")
            np.savez(tmp, **compute())
            tmp.replace(path)
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _ids(cp) -> list[int]:
    return [int(x) for x in cp.stdout.strip().strip("[]").split(",")]


def test_logits_match_transformers_at_every_position(model_file, golden, tmp_path):
    worst = 0.0
    for i in range(len(TEXT_PROMPTS)):
        ids, want = golden[f"text{i}_ids"], golden[f"text{i}_logits"]
        out = tmp_path / f"p{i}.npy"
        cp = run_lumen("--exact", "logits", "-m", model_file, "--tokens", tokens_arg(ids), "--out", out)
        assert cp.returncode == 0, describe(cp)
        got = np.load(out)
        assert got.shape == want.shape, f"prompt {i}: shape {got.shape} != {want.shape}"
        assert want.std() > 1.0 and np.isfinite(want).all(), f"prompt {i}: degenerate reference"
        scale = np.abs(want).max(axis=1)
        rel = np.abs(got - want).max(axis=1) / scale
        worst = max(worst, float(rel.max()))
        bad = np.nonzero(rel > REL_TOL)[0]
        assert bad.size == 0, (f"prompt {i} ({len(ids)} tokens): positions {bad.tolist()} differ by "
                               f"{rel[bad].tolist()} of max |logit| (tolerance {REL_TOL})")
        assert (got.argmax(1) == want.argmax(1)).all(), f"prompt {i}: argmax differs"
    record("gemma3_gguf", "logits", {"prompts": len(TEXT_PROMPTS), "worst_rel_diff": worst, "tolerance": REL_TOL})


def test_greedy_chat_continuations_match_transformers(model_file, golden):
    n = GREEDY_N
    for i, question in enumerate(CHAT_QUESTIONS):
        want = golden[f"chat{i}_greedy"].tolist()
        t0 = time.monotonic()
        cp = run_lumen("--exact", "run", "-m", model_file, "--tokens", tokens_arg(golden[f"chat{i}_ids"]), "-n", n)
        elapsed = time.monotonic() - t0
        assert cp.returncode == 0, describe(cp)
        got = _ids(cp)
        assert got == want, (f"{question!r}: greedy continuations differ\n lumen: {got}\n  ref:  {want}\n"
                             f" ref text: {str(golden[f'chat{i}_text'])!r}")
        record("gemma3_gguf", f"greedy {question}",
               {"tokens": GREEDY_N, "lumen_s": elapsed, "text": str(golden[f"chat{i}_text"])})


def test_greedy_past_the_sliding_window(model_file, golden):
    """A prompt longer than the 512-token window: sliding layers must drop the oldest keys."""
    ids = golden["long_ids"]
    assert len(ids) > 600, len(ids)
    cp = run_lumen("--exact", "run", "-m", model_file, "--tokens", tokens_arg(ids), "-n", LONG_N)
    assert cp.returncode == 0, describe(cp)
    assert _ids(cp) == golden["long_greedy"].tolist(), f"after {len(ids)} tokens"


# Perplexity on public-domain text from a Debian package: Genesis 1 of the King James Version
# as the `bible` program of bible-kjv prints it (scripts/setup --test installs it).
PPL_VERSES = "gen1:1-gen1:31"
PPL_CTX = 128
PPL_MAX_TOKENS = 300
PPL_REL_TOL = 1e-4


@pytest.fixture(scope="module")
def kjv_text(tmp_path_factory) -> Path:
    import shutil
    import subprocess

    bible = shutil.which("bible")
    if not bible:
        pytest.fail("the `bible` program is missing: run scripts/setup --test (Debian package bible-kjv)")
    text = subprocess.run([bible, PPL_VERSES], capture_output=True, text=True, check=True).stdout
    assert "In the beginning God created the heaven and the earth." in text
    path = tmp_path_factory.mktemp("kjv") / "genesis1.txt"
    path.write_text(text, encoding="utf-8")
    return path


def test_perplexity_matches_transformers(model_file, kjv_text):
    text = kjv_text.read_text(encoding="utf-8")

    def compute():
        tok = ref.tokenizer(model_file)
        ids = tok(text, add_special_tokens=False).input_ids[:PPL_MAX_TOKENS]
        r = ref.perplexity(ref.load(model_file), ids, PPL_CTX, tok.bos_token_id)
        return {"tokens": np.array(r["tokens"]), "ppl": np.array(r["ppl"])}

    want = _cached("gemma3-270m-ppl", model_file, repr((text, PPL_CTX, PPL_MAX_TOKENS)), compute)
    cp = run_lumen("--exact", "perplexity", "-m", model_file, "-f", kjv_text, "--ctx", PPL_CTX,
                   "--max-tokens", PPL_MAX_TOKENS, "--json")
    assert cp.returncode == 0, describe(cp)
    assert cp.stderr == "", f"no progress bar when stderr is not a terminal\n{describe(cp)}"
    got = json.loads(cp.stdout)
    assert got["tokens"] == int(want["tokens"]), f"scored {got['tokens']} tokens, reference {int(want['tokens'])}"
    rel = abs(got["ppl"] - float(want["ppl"])) / float(want["ppl"])
    assert rel <= PPL_REL_TOL, f"perplexity {got['ppl']} vs transformers {float(want['ppl'])} (rel {rel:.2e})"
    record("gemma3_gguf", "perplexity", {"lumen": got["ppl"], "transformers": float(want["ppl"]),
                                         "tokens": got["tokens"], "ctx": PPL_CTX, "text": PPL_VERSES})
