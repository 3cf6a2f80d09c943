"""Quantized-weight quality on a real trained model: Gemma 3 270M (the default model).

The tiny test models have random weights and amplify any perturbation (bf16 rounding alone
flips ~3-5% of their top-1 tokens), so the issue's q8 bar (top-1 agreement >= 99% against the
f32 path of the same weights) is measured here, on real weights, and on a trained tiny model
(test_quant_trained.py). The GGUF's blocks are expanded exactly to f32 (`--quant f32`, the
reference) and, separately, stored as bf16 (f32 activations) or quantized at load with the mixes
and quantizers of `lumen quantize` (`--quant q8` = Q8_0, `--quant Q4_0`), run on the block
kernels. `--quant q4` is the Q4_K_M mix: this file's own, so every tensor keeps its stored
blocks and the logits equal the file's as loaded. 256 positions of public-domain text (KJV
Genesis, Debian bible-kjv). The figures go to parity_report.json.

Measured (2026-12-03, this test, AVX2): bf16 98.4% / KL 3.0e-4; q8 98.8% / KL 0.0014 with the
default split activations (LUMEN_BLOCK_ACT=int8x2: two int8 halves per block), 94.5% / KL 0.015
with single int8 activations (LUMEN_BLOCK_ACT=int8); q4 (the file itself on the block kernels)
100% / KL 1.5e-7; Q4_0 62.9% / KL 1.45, requantized from the Q4_K_M blocks with the embedding at
Q8_0 (the round-to-nearest Q4_0 of every matrix, embedding included, that `--quant q4` and
`--quant q8` were before: q4 57.0% / KL 1.74, q8 96.9% / KL 0.0045, the previous binary on the
same positions). The split takes the activations' share of the error away; what is left is the
Q8_0 weights' rounding. q8 stays below the issue's 99% bar on this model (the bar is met on a
trained tiny model, test_quant_trained.py); the kernels equal their scalar reference (unit
tests), so the loss is in the format, not a kernel. The assertions pin what is measured with
about 2x margin in KL (Q4_0: 10%, below what the round-to-nearest Q4_0 gave), so a regression
fails, and keep the order bf16 < q8 < q8 (int8 activations) < Q4_0 in KL.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import REPO, describe, record, run_lumen, tokens_arg, work_dir

MODEL = REPO / "models" / "gemma-3-270m-q4_k_m.gguf"
POSITIONS = 256


@pytest.fixture(scope="module")
def prompt_ids() -> list[int]:
    if not MODEL.is_file():
        pytest.fail(f"{MODEL} is missing: run scripts/setup (it installs the default model)")
    bible = shutil.which("bible")
    if not bible:
        pytest.fail("the `bible` program is missing: run scripts/setup --test (Debian package bible-kjv)")
    text = subprocess.run([bible, "gen1:1-gen2:25"], capture_output=True, text=True, check=True).stdout
    cp = run_lumen("tokenize", "-m", str(MODEL), text)
    assert cp.returncode == 0, describe(cp)
    ids = json.loads(cp.stdout)
    assert len(ids) >= POSITIONS - 1, len(ids)
    return [2] + ids[: POSITIONS - 1]  # <bos> then the text


def logits_at(quant: str, ids: list[int]) -> np.ndarray:
    out = work_dir() / f"real-model-logits-{quant or 'stored'}-{os.getpid()}.npy"
    cp = run_lumen("logits", "-m", str(MODEL), "--tokens", tokens_arg(ids), "--out", str(out), *(["--quant", quant] if quant else []))
    assert cp.returncode == 0, describe(cp)
    logits = np.load(out)
    out.unlink()
    assert logits.shape == (len(ids), 262144)
    assert np.isfinite(logits).all()
    return logits


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def compare(ref: np.ndarray, got: np.ndarray) -> dict:
    top1 = float((ref.argmax(-1) == got.argmax(-1)).mean())
    lp, lq = log_softmax(ref), log_softmax(got)
    kl = float((np.exp(lp) * (lp - lq)).sum(-1).mean())
    return {"top1_agreement": top1, "mean_kl": kl, "positions": int(ref.shape[0])}


def test_q8_and_q4_against_the_f32_path_on_real_weights(prompt_ids, monkeypatch):
    ref = logits_at("f32", prompt_ids)
    # The reference itself is the exact expansion: it must agree with the model's own
    # (block-format) path, which the transformers parity test pins to ~1e-6.
    own_path = work_dir() / "real-model-logits-own.npy"
    cp = run_lumen("--exact", "logits", "-m", str(MODEL), "--tokens", tokens_arg(prompt_ids[:32]), "--out", str(own_path))
    assert cp.returncode == 0, describe(cp)
    own = np.load(own_path)
    own_path.unlink()
    assert np.abs(own - ref[:32]).max() <= 1e-4 * np.abs(ref[:32]).max()

    bf16 = compare(ref, logits_at("bf16", prompt_ids))
    monkeypatch.setenv("LUMEN_BLOCK_ACT", "int8x2")
    q8 = compare(ref, logits_at("q8", prompt_ids))
    monkeypatch.setenv("LUMEN_BLOCK_ACT", "int8")
    q8_int8 = compare(ref, logits_at("q8", prompt_ids))
    monkeypatch.delenv("LUMEN_BLOCK_ACT")
    q4_logits = logits_at("q4", prompt_ids)
    # q4 is the Q4_K_M mix, the file's own: nothing is requantized.
    assert np.array_equal(q4_logits, logits_at("", prompt_ids))
    q4 = compare(ref, q4_logits)
    del q4_logits
    q4_0 = compare(ref, logits_at("Q4_0", prompt_ids))
    record("quant_real_model", "gemma3-270m",
           {"bf16": bf16, "q8": q8, "q8_int8_activations": q8_int8, "q4": q4, "Q4_0": q4_0})
    print(f"bf16: {bf16}\nq8: {q8}\nq8 (int8 activations): {q8_int8}\nq4 (= Q4_K_M): {q4}\nQ4_0: {q4_0}")
    assert bf16["top1_agreement"] >= 0.97 and bf16["mean_kl"] < 1e-3, bf16
    assert q8["top1_agreement"] >= 0.97 and q8["mean_kl"] < 0.003, q8
    assert q8_int8["top1_agreement"] >= 0.92 and q8_int8["mean_kl"] < 0.03, q8_int8
    assert q4["top1_agreement"] >= 0.99 and q4["mean_kl"] < 1e-5, q4
    assert q4_0["top1_agreement"] >= 0.6 and q4_0["mean_kl"] < 1.6, q4_0
    assert bf16["mean_kl"] < q8["mean_kl"] < q8_int8["mean_kl"] < q4_0["mean_kl"], (bf16, q8, q8_int8, q4_0)
