"""Quantized quality on a TRAINED tiny model, against the f32 path of the same weights.

The issue's bar: over 256 teacher-forced positions, top-1 agreement and mean KL(p_f32 || p_quant)
of the next-token distribution for q8 and q4, reported; q8 top-1 agreement >= 99%.

The random tiny models of test_quant.py cannot carry that bar (their near-flat, noise-amplifying
logits flip 3-5% of top-1 tokens under bf16 rounding alone), so this test trains one:
tools/train_tiny_gemma4.py, a byte-level Gemma 4 with the tiny-mixed layer pattern at hidden 128,
trained ~30 CPU-seconds on the KJV Pentateuch (Debian's bible-kjv), deterministic from its seed,
cached in LUMEN_WORK_DIR/models keyed by the trainer's source and the torch/transformers
versions. The 256 evaluation positions are held-out text (Matthew).

Formats, all made at load from the same f32 checkpoint (`--quant`: the mixes and quantizers of
`lumen quantize`), the quantized ones run on the block kernels:
  bf16  weights rounded to bf16, f32 activations
  q8    = Q8_0: every matrix Q8_0, activations as two int8 halves (the default, LUMEN_BLOCK_ACT=int8x2)
  q8 with LUMEN_BLOCK_ACT=int8: the same weights, single int8 activations (reported, weaker bound)
  q4    = Q4_K_M: hidden 128 is not a whole 256-block, so llama.cpp's fallbacks give Q5_0 for
        Q4_K and Q8_0 for the Q6_K it raises (attn_v, ffn_down on the outer layers, the
        embedding), split activations
Figures go to LUMEN_WORK_DIR/parity_report.json (section quant_trained) and docs/kernels.md.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import TOOLS, _locked, describe, record, ref, run_lumen, tokens_arg, work_dir

import train_tiny_gemma4 as trainer  # noqa: E402  (conftest put tools/ on sys.path)

POSITIONS = 256
SEED = 0
PREFIX = "lumen: error: "


def _trainer_stamp() -> str:
    import torch
    import transformers

    h = hashlib.sha256()
    for name in ("train_tiny_gemma4.py", "make_tiny_gemma4.py"):
        h.update((TOOLS / name).read_bytes())
    h.update(f"{torch.__version__} {transformers.__version__} seed={SEED}".encode())
    return h.hexdigest()[:16]


@pytest.fixture(scope="module")
def trained() -> Path:
    if not shutil.which("bible"):
        pytest.fail("the `bible` program is missing: run scripts/setup --test (Debian package bible-kjv)")
    root = work_dir() / "models"
    out = root / f"trained-tiny-s{SEED}"
    stamp = _trainer_stamp()
    with _locked(root / ".trained-tiny.lock"):
        done = out / ".lumen-built"
        if not (done.exists() and done.read_text() == stamp):
            tmp = root / f".trained-tiny.tmp{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            summary = trainer.train(tmp, seed=SEED, log=lambda s: None)
            print(json.dumps(summary, indent=2))
            (tmp / ".lumen-built").write_text(stamp)
            shutil.rmtree(out, ignore_errors=True)
            os.replace(tmp, out)
    return out


@pytest.fixture(scope="module")
def eval_ids() -> list[int]:
    ids = trainer.eval_ids(POSITIONS + 1)
    assert len(ids) == POSITIONS + 1
    return ids


def lumen_logits(tmp_path: Path, model: Path, ids, quant: str | None, name: str) -> np.ndarray:
    out = tmp_path / f"{name}.npy"
    args = ["logits", "-m", model, "--tokens", tokens_arg(ids), "--out", out]
    if quant:
        args += ["--quant", quant]
    cp = run_lumen(*args)
    assert cp.returncode == 0, describe(cp)
    got = np.load(out).astype(np.float64)
    assert got.shape == (len(ids), trainer.VOCAB) and np.isfinite(got).all()
    return got


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def compare(ref_logits: np.ndarray, got: np.ndarray) -> dict:
    lr, lg = log_softmax(ref_logits), log_softmax(got)
    kl = (np.exp(lr) * (lr - lg)).sum(-1)
    return dict(top1_agreement=float((ref_logits.argmax(-1) == got.argmax(-1)).mean()),
                mean_kl=float(kl.mean()), max_kl=float(kl.max()),
                logit_diff_std=float((got - ref_logits).std()), positions=int(ref_logits.shape[0]))


def test_q8_and_q4_against_f32_on_a_trained_model(trained, eval_ids, tmp_path, monkeypatch):
    ids = eval_ids[:POSITIONS]
    f32 = lumen_logits(tmp_path, trained, ids, None, "f32")

    # The reference is right: Lumen's f32 path equals transformers' on this checkpoint ...
    torch_logits = np.asarray(ref.logits(trained, ids), dtype=np.float64)
    assert np.abs(f32 - torch_logits).max() <= 1e-4 * np.abs(torch_logits).max() + 1e-4
    # ... and the model is trained: it predicts the held-out text far better than chance
    # (ln 256 = 5.5 nats/byte), with decisive distributions.
    lp = log_softmax(f32)
    nll = float(-lp[np.arange(POSITIONS), np.asarray(eval_ids[1:POSITIONS + 1])].mean())
    top_p = float(np.exp(lp.max(-1)).mean())
    assert nll <= 2.6, nll  # measured 2.20
    assert top_p >= 0.35, top_p  # measured 0.43

    figures = {"f32": {"eval_nll_nats_per_byte": nll, "mean_top1_probability": top_p}}
    figures["bf16"] = compare(f32, lumen_logits(tmp_path, trained, ids, "bf16", "bf16"))
    monkeypatch.setenv("LUMEN_BLOCK_ACT", "int8x2")
    figures["q8"] = compare(f32, lumen_logits(tmp_path, trained, ids, "q8", "q8"))
    monkeypatch.setenv("LUMEN_BLOCK_ACT", "int8")
    figures["q8_int8_activations"] = compare(f32, lumen_logits(tmp_path, trained, ids, "q8", "q8-int8"))
    monkeypatch.delenv("LUMEN_BLOCK_ACT")
    figures["q4"] = compare(f32, lumen_logits(tmp_path, trained, ids, "q4", "q4"))
    record("quant_trained", f"trained-tiny-s{SEED}", figures)
    print(json.dumps(figures, indent=2))

    q8, q8s, q4, bf16 = figures["q8"], figures["q8_int8_activations"], figures["q4"], figures["bf16"]
    # Measured (seed 0, 2026-12-03, Q8_0 / Q4_K_M mixes on the block kernels): bf16 99.6% / KL
    # 2.0e-6; q8 100% / 1.5e-5; q8 with int8 activations 99.6% / 4.5e-5; q4 98.8% / 4.3e-4 (the
    # round-to-nearest Q4_0 that q4 was before: 94.9% / 4.8e-3). Bounds: the bar for
    # q8, about 4x the measured KL elsewhere.
    assert q8["top1_agreement"] >= 0.99, q8          # the bar
    assert q8["mean_kl"] <= 1e-4, q8
    assert q8s["top1_agreement"] >= 0.97 and q8s["mean_kl"] <= 2e-4, q8s
    assert bf16["top1_agreement"] >= 0.99 and bf16["mean_kl"] <= 1e-5, bf16
    assert q4["top1_agreement"] >= 0.96 and q4["mean_kl"] <= 2e-3, q4
    # Each step of precision helps: bf16 < q8 (split activations) < q8 (int8) < q4 in KL.
    assert bf16["mean_kl"] < q8["mean_kl"] < q8s["mean_kl"] < q4["mean_kl"], figures


@pytest.mark.parametrize("variable", ["LUMEN_BLOCK_ACT", "LUMEN_Q8_ACT"])
def test_bad_activation_mode_is_one_clear_error(trained, tmp_path, monkeypatch, variable):
    """LUMEN_BLOCK_ACT drives the block kernels (`--quant q8`: Q8_0 blocks), LUMEN_Q8_ACT the
    interleaved Q8_0X4 kernels (a synthetic q8 .lmp)."""
    model, flags = trained, ["--quant", "q8"]
    if variable == "LUMEN_Q8_ACT":
        model, flags = tmp_path / "synthetic-q8.lmp", []
        cp = run_lumen("convert", "--synthetic", trained / "config.json", model, "--quant", "q8")
        assert cp.returncode == 0, describe(cp)
    monkeypatch.setenv(variable, "int16")
    out = tmp_path / "x.npy"
    cp = run_lumen("logits", "-m", model, "--tokens", "2,5,6", "--out", out, *flags)
    assert cp.returncode == 1, describe(cp)
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX), describe(cp)
    assert variable in lines[0] and "int16" in lines[0], describe(cp)
    assert not out.exists()
