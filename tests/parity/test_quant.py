"""Quantized inference: quality against the f32 path, the packed .lmp file, and bad packed files.

Quality: the same tiny checkpoint (tools/make_tiny_gemma4.py, f32 weights) is run through
`lumen logits` over 256 teacher-forced positions on the f32 path and with the weights quantized
at load (model/quantize_weights.h, the mixes and quantizers of `lumen quantize`) to q8 (= Q8_0:
every matrix Q8_0) and q4 (= Q4_K_M; tiny-mixed's rows of 64 and 128 are not whole 256-blocks,
so llama.cpp's fallbacks apply: Q5_0 for Q4_K, Q8_0 for Q6_K), both run on the block kernels
with activations as two int8 halves per block (the default, LUMEN_BLOCK_ACT=int8x2).
Figures: top-1 agreement and mean KL(p_f32 || p_quant) of the next-token distribution.

These random tiny models are far more sensitive than trained ones: rounding the f32 weights to
bf16 alone moves the top-1 token at ~3-5% of positions, and Q8_0 weights alone (f32 activations)
at ~10% (logit noise std ~0.2 against a median top-2 margin of ~0.6). The issue's target
(q8 top-1 >= 99%) is therefore NOT reachable on these models by any Q8_0 engine; it is checked on
a trained tiny model instead (test_quant_trained.py: q8 100%). Measured here (seed 7): q8 89%
overall (85% with single int8 activations), 100% where the f32 reference is decisive (top-2
margin >= 1.5 logits, ~4x q8's logit noise). The checks below bound what these models allow and
would catch a broken kernel: decisive agreement >= 95%, KL <= 0.1, logit noise <= 20% of the
logit spread, and the KL ordering bf16 < q8 < q4 (measured 2026-12-03: q4 36% / KL 1.05; the
round-to-nearest Q4_0 `--quant q4` was before: 9.8% / 2.85). Figures go to
LUMEN_WORK_DIR/parity_report.json and docs/kernels.md. That `--quant` holds exactly the bits of
`lumen quantize`'s file: test_quant_at_load.py.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from conftest import describe, model_dir, record, run_lumen, token_sequence, tokens_arg

PREFIX = "lumen: error: "
POSITIONS = 256
DECISIVE_MARGIN = 1.5


@pytest.fixture(scope="module")
def tiny32():
    return model_dir("tiny-mixed", dtype="float32")


def logits(tmp_path: Path, model, tokens, quant=None, name="x") -> np.ndarray:
    out = tmp_path / f"{name}.npy"
    args = ["logits", "-m", model, "--tokens", tokens_arg(tokens), "--out", out]
    if quant:
        args += ["--quant", quant]
    cp = run_lumen(*args)
    assert cp.returncode == 0, describe(cp)
    return np.load(out).astype(np.float64)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def compare(ref: np.ndarray, got: np.ndarray) -> dict:
    lr, lg = log_softmax(ref), log_softmax(got)
    kl = (np.exp(lr) * (lr - lg)).sum(-1)
    top = np.sort(ref, -1)
    decisive = (top[:, -1] - top[:, -2]) >= DECISIVE_MARGIN
    agree = ref.argmax(-1) == got.argmax(-1)
    return dict(top1_agreement=float(agree.mean()), mean_kl=float(kl.mean()),
                decisive_positions=int(decisive.sum()), decisive_top1_agreement=float(agree[decisive].mean()),
                logit_diff_std=float((got - ref).std()))


def test_quantized_quality_against_f32(tiny32, tmp_path):
    cfg = json.loads((tiny32 / "config.json").read_text())
    tokens = token_sequence(cfg["vocab_size"], POSITIONS, seed=7)
    ref = logits(tmp_path, tiny32, tokens, name="f32")
    assert np.isfinite(ref).all()
    figures = {}
    for quant in ("bf16", "q8", "q4"):
        got = logits(tmp_path, tiny32, tokens, quant, name=quant)
        assert got.shape == ref.shape and np.isfinite(got).all()
        figures[quant] = compare(ref, got)
    record("quant", "tiny-mixed-f32", figures)
    print(json.dumps(figures, indent=2))
    q8, q4, bf16 = figures["q8"], figures["q4"], figures["bf16"]
    assert q8["decisive_positions"] >= 32, q8
    assert q8["logit_diff_std"] <= 0.2 * float(ref.std()), q8
    assert q8["decisive_top1_agreement"] >= 0.95, q8
    assert q8["top1_agreement"] >= 0.75, q8
    assert q8["mean_kl"] <= 0.1, q8
    # Finer formats are closer: bf16 < q8 < q4 in KL (a broken kernel breaks the order).
    assert bf16["mean_kl"] < q8["mean_kl"] < q4["mean_kl"], figures
    assert q4["mean_kl"] <= 2.0, q4


@pytest.fixture(scope="module")
def packed(tiny32, tmp_path_factory):
    d = tmp_path_factory.mktemp("packed")
    out = {}
    for quant in ("q4", "q8", "f32"):
        path = d / f"tiny-{quant}.lmp"
        cp = run_lumen("convert", tiny32, path, "--quant", quant)
        assert cp.returncode == 0, describe(cp)
        assert path.is_file() and not list(d.glob("*.tmp-*"))
        out[quant] = path
    return out


@pytest.mark.parametrize("quant", ["q4", "q8", "f32"])
def test_packed_file_gives_the_same_logits_as_the_checkpoint(tiny32, packed, tmp_path, quant):
    tokens = token_sequence(512, 24, seed=3)
    from_dir = logits(tmp_path, tiny32, tokens, quant, name="dir")
    from_file = logits(tmp_path, packed[quant], tokens, name="file")
    assert np.array_equal(from_dir, from_file)


def _header(path: Path):
    raw = path.read_bytes()
    (n,) = struct.unpack_from("<Q", raw, 16)
    return raw, json.loads(raw[24:24 + n])


def _refused(tmp_path: Path, model: Path, *words):
    cp = run_lumen("logits", "-m", model, "--tokens", "2,5,6", "--out", tmp_path / "x.npy")
    assert cp.returncode == 1, describe(cp)
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX), describe(cp)
    assert str(model) in lines[0], describe(cp)
    for w in words:
        assert w in lines[0], describe(cp)
    assert not (tmp_path / "x.npy").exists()


def test_truncated_packed_file(packed, tmp_path):
    raw = packed["q4"].read_bytes()
    bad = tmp_path / "trunc.lmp"
    bad.write_bytes(raw[: len(raw) * 2 // 3])
    _refused(tmp_path, bad, "truncated")
    tiny = tmp_path / "tiny.lmp"
    tiny.write_bytes(raw[:40])
    _refused(tmp_path, tiny, "truncated")


def test_newer_format_version(packed, tmp_path):
    raw = bytearray(packed["q4"].read_bytes())
    struct.pack_into("<I", raw, 8, 99)
    bad = tmp_path / "newer.lmp"
    bad.write_bytes(bytes(raw))
    _refused(tmp_path, bad, "version 99", "newer")


def test_other_architecture(packed, tmp_path):
    raw = packed["q4"].read_bytes()
    assert raw.count(b'"architecture":"gemma4"') == 1
    bad = tmp_path / "arch.lmp"
    bad.write_bytes(raw.replace(b'"architecture":"gemma4"', b'"architecture":"llama3"'))
    _refused(tmp_path, bad, "'llama3'", "not supported")


def test_q4_file_holds_the_q4_k_m_mix(packed):
    _, header = _header(packed["q4"])
    assert header["quant"] == "Q4_K_M"
    formats = {t["format"] for t in header["tensors"] if len(t["shape"]) > 1}
    # Rows of 64 / 128: Q4_K falls back to Q5_0 and the raised tensors' Q6_K to Q8_0.
    assert formats == {"Q5_0", "Q8_0"}, formats
    assert {t["format"] for t in header["tensors"] if len(t["shape"]) == 1} == {"F32"}


def test_unknown_storage_format(packed, tmp_path):
    raw = packed["q4"].read_bytes()
    bad = tmp_path / "fmt.lmp"
    assert b'"format":"Q5_0"' in raw
    bad.write_bytes(raw.replace(b'"format":"Q5_0"', b'"format":"Q9_9"', 1))  # same length: the header's size stays
    _refused(tmp_path, bad, "Q9_9")


def test_convert_refuses_bad_input_and_leaves_nothing(tiny32, tmp_path):
    out = tmp_path / "x.lmp"
    cp = run_lumen("convert", tiny32, out, "--quant", "q3")
    assert cp.returncode == 1 and cp.stderr.startswith(PREFIX) and "q3" in cp.stderr, describe(cp)
    assert "--quant" in cp.stderr and "Q4_K_M" in cp.stderr and "IQ4_XS" in cp.stderr, describe(cp)
    cp = run_lumen("convert", tiny32, out, "--quant", "bf16", "--imatrix", tmp_path / "im.gguf")
    assert cp.returncode == 1 and cp.stderr.startswith(PREFIX) and "--imatrix" in cp.stderr, describe(cp)
    cp = run_lumen("convert", "--synthetic", tiny32 / "config.json", out, "--quant", "Q4_K_M")
    assert cp.returncode == 1 and cp.stderr.startswith(PREFIX) and "--synthetic" in cp.stderr, describe(cp)
    cp = run_lumen("convert", tmp_path / "missing", out)
    assert cp.returncode == 1 and cp.stderr.startswith(PREFIX), describe(cp)
    cp = run_lumen("convert", tiny32, tmp_path / "no" / "such" / "dir" / "x.lmp")
    assert cp.returncode == 1 and cp.stderr.startswith(PREFIX) and len(cp.stderr.strip().splitlines()) == 1, describe(cp)
    assert list(tmp_path.iterdir()) == []


def test_synthetic_model_and_bench(tmp_path):
    """A synthetic packed model of tiny shapes runs, and `lumen bench --json` reports sane figures."""
    cfg = json.loads((model_dir("tiny-mixed") / "config.json").read_text())
    cfg_path = tmp_path / "config.json"
    cfg_path.write_text(json.dumps(cfg))
    out = tmp_path / "synth.lmp"
    cp = run_lumen("convert", "--synthetic", cfg_path, out, "--quant", "q4", "--seed", "5")
    assert cp.returncode == 0, describe(cp)
    cp = run_lumen("bench", "-m", out, "-p", "8", "-n", "4", "--json")
    assert cp.returncode == 0, describe(cp)
    r = json.loads(cp.stdout)
    assert r["prefill"]["tokens"] == 8 and r["decode"]["tokens"] == 4
    assert r["prefill"]["tokens_per_s"] > 0 and r["decode"]["tokens_per_s"] > 0
    assert r["machine"]["read_bandwidth_gbs"] > 0 and r["machine"]["int8_peak_gops"] > 0
    assert r["decode"]["bytes_per_token"] > 0 and 0 < r["decode"]["fraction_of_bandwidth_roofline"]
    assert r["peak_rss_bytes"] > 0
