"""Quantized-weight quality on a real trained model: Gemma 3 270M (the default model).

The tiny test models have random weights and amplify any perturbation (bf16 rounding alone
flips ~3-5% of their top-1 tokens), so the issue's q8 bar (top-1 agreement >= 99% against the
f32 path of the same weights) is measured here, on real weights, and on a trained tiny model
(test_quant_trained.py): the GGUF's blocks are expanded
exactly to f32 (`--quant f32`, the reference) and, separately, stored as bf16 (f32 activations)
or requantized to Q8_0 / Q4_0 and run through the int8-activation kernels (`--quant q8`,
`--quant q4`). 256 positions of public-domain text (KJV Genesis, Debian bible-kjv). The figures
go to parity_report.json.

Measured (2026-12-03, this test): bf16 98.4% / KL 3.0e-4; q8 96.9% / KL 0.0045 with the
default split activations (LUMEN_Q8_ACT=int8x2: two int8 halves per block), 94.5% / KL 0.020
with single int8 activations (LUMEN_Q8_ACT=int8); q4 53% / KL 1.74. The split takes the
activations' share of the error away (KL / 4.4); what is left is the Q8_0 weights' rounding.
q8 stays below the issue's 99% bar on this model (the bar is met on a trained tiny model,
test_quant_trained.py); the kernels equal their scalar reference (unit tests), so the loss is
in the format, not a kernel. The assertions pin what is measured with about 2x margin in
KL, so a regression fails, and keep the order bf16 < q8 < q8 (int8 activations) < q4 in KL.
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
    out = work_dir() / f"real-model-logits-{quant}-{os.getpid()}.npy"
    cp = run_lumen("logits", "-m", str(MODEL), "--tokens", tokens_arg(ids), "--out", str(out), "--quant", quant)
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
    monkeypatch.setenv("LUMEN_Q8_ACT", "int8x2")
    q8 = compare(ref, logits_at("q8", prompt_ids))
    monkeypatch.setenv("LUMEN_Q8_ACT", "int8")
    q8_int8 = compare(ref, logits_at("q8", prompt_ids))
    monkeypatch.delenv("LUMEN_Q8_ACT")
    q4 = compare(ref, logits_at("q4", prompt_ids))
    record("quant_real_model", "gemma3-270m",
           {"bf16": bf16, "q8": q8, "q8_int8_activations": q8_int8, "q4": q4})
    print(f"bf16: {bf16}\nq8: {q8}\nq8 (int8 activations): {q8_int8}\nq4: {q4}")
    assert bf16["top1_agreement"] >= 0.97 and bf16["mean_kl"] < 1e-3, bf16
    assert q8["top1_agreement"] >= 0.95 and q8["mean_kl"] < 0.009, q8
    assert q8_int8["top1_agreement"] >= 0.92 and q8_int8["mean_kl"] < 0.04, q8_int8
    assert q4["top1_agreement"] >= 0.45 and q4["mean_kl"] < 3.5, q4
    assert bf16["mean_kl"] < q8["mean_kl"] < q8_int8["mean_kl"] < q4["mean_kl"], (bf16, q8, q8_int8, q4)
