"""A tiny random Gemma 3 GGUF written by llama.cpp's own Python writer
(tools/make_tiny_gemma3_gguf.py: 6 layers, window 4, Q8_0/Q5_0/Q4_0/F16 projections) runs and
matches transformers loading the same file: logits at every position over a sequence 3x the
window (so the sliding layers' dropped keys and the global layer both matter), and greedy
through the KV cache.
"""
from __future__ import annotations

import numpy as np

from conftest import describe, run_lumen, tokens_arg

import make_tiny_gemma3_gguf as mk
import reference_gemma3_gguf as ref

REL_TOL = 1e-4


def test_tiny_gguf_logits_match_transformers(tmp_path):
    path = tmp_path / "tiny.gguf"
    mk.build(path, seed=3, window=4, layers=6)
    ids = [2] + [int(x) for x in np.random.default_rng(0).integers(4, mk.VOCAB, size=13)]
    model = ref.load(path)
    assert model.config.layer_types.count("full_attention") == 1 and model.config.sliding_window == 4
    want = ref.logits(model, ids)
    out = tmp_path / "got.npy"
    cp = run_lumen("--exact", "logits", "-m", path, "--tokens", tokens_arg(ids), "--out", out)
    assert cp.returncode == 0, describe(cp)
    got = np.load(out)
    assert want.std() > 0.5
    rel = np.abs(got - want).max(axis=1) / np.abs(want).max(axis=1)
    assert (rel <= REL_TOL).all(), f"relative differences per position: {rel.tolist()}"
    # Greedy through the KV cache agrees with the full-sequence argmax chain of the reference.
    cont = ref.greedy(model, ids, 6)
    cp = run_lumen("--exact", "run", "-m", path, "--tokens", tokens_arg(ids), "-n", 6)
    assert cp.returncode == 0, describe(cp)
    assert [int(x) for x in cp.stdout.strip().strip("[]").split(",")] == cont
