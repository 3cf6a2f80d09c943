"""Lumen on packages made by Google's converter (litert-torch's Gemma 3 270M, int8 and int4), checked
against the HF checkpoint they were converted from.

Inputs (outside the repository, written by the litert-google tooling; the test is skipped, saying
why, when they are absent):
  LUMEN_LITERT_CACHE   folder with gemma3-270m-int8-9c15cd2e52c3.litertlm / ...-int4-a6259eb951ac.litertlm
                       and their .config.json (default /work/cache/litert)
  LUMEN_LITERT_SOURCE  the safetensors checkpoint directory they were converted from

The map files (tools/litert_maps/) are bound to these exact packages by their tensor table hash.

  * int8 (per-channel, zero point 0): `lumen verify` passes: every one of the 236 mapped tensors
    within 0.5% of max|source| (half an int8 step of the row's largest value), first-token logits
    within 1.5 and the same argmax;
  * int4 (blockwise, 32 per block, f16 scales): every tensor within 7.5% of max|source| (half a
    4-bit step), which a wrong nibble order or sign convention would break by far;
  * the int8 package's greedy continuation is the GGUF default model's on a prompt whose top-1
    is decisive.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import REPO, describe, run_lumen

CACHE = Path(os.environ.get("LUMEN_LITERT_CACHE", "/work/cache/litert"))
SOURCE = os.environ.get("LUMEN_LITERT_SOURCE", "")
MAPS = REPO / "tools" / "litert_maps"
INT8 = "gemma3-270m-int8-9c15cd2e52c3"
INT4 = "gemma3-270m-int4-a6259eb951ac"
TOKENS = "2,818,5279,529,7001,563"  # <bos>The capital of France is


def package(stem: str) -> list:
    pkg = CACHE / f"{stem}.litertlm"
    if not pkg.exists():
        pytest.skip(f"{pkg} is absent (made by the litert-google tooling)")
    return [pkg, "--config", CACHE / f"{stem}.config.json", "--map", MAPS / f"{stem}.map.json"]


def source() -> str:
    if not SOURCE or not Path(SOURCE, "model.safetensors").exists():
        pytest.skip("LUMEN_LITERT_SOURCE (the HF checkpoint the packages came from) is not set")
    return SOURCE


def test_int8_package_verifies_against_its_source(tmp_path):
    pkg, *rest = package(INT8)
    out = tmp_path / "r.json"
    cp = run_lumen("verify", pkg, "--against", source(), *rest, "--tolerance", "0.005", "--logits-tolerance", "1.5",
                   "--tokens", TOKENS, "--out", out, timeout=600)
    assert cp.returncode == 0, describe(cp)
    r = json.loads(out.read_text())
    assert r["verdict"] == "pass" and len(r["tensors"]) == 236
    assert r["first_token_logits"]["f32"]["argmax"] == r["first_token_logits"]["f32"]["source_argmax"]


def test_int4_package_tensors_match_its_source(tmp_path):
    pkg, *rest = package(INT4)
    out = tmp_path / "r.json"
    cp = run_lumen("verify", pkg, "--against", source(), *rest, "--tolerance", "0.075", "--logits-tolerance", "1e9",
                   "--tokens", TOKENS, "--out", out, timeout=600)
    r = json.loads(out.read_text())
    bad = [(t["layer"], t["role"], t.get("max_abs_error")) for t in r["tensors"] if not t["match"]]
    assert not bad, bad
    assert len(r["tensors"]) == 236
    # The argmax may move under int4: the verdict then fails on it, and only on it.
    assert cp.returncode in (0, 2), describe(cp)
    assert all("first-token logits" in f for f in r["faults"]), r["faults"]


def test_int8_package_greedy_equals_the_gguf_default_model():
    pkg, *rest = package(INT8)
    gguf = REPO / "models" / "gemma-3-270m-q4_k_m.gguf"
    if not gguf.exists():
        pytest.skip("the default GGUF model is not installed")
    ours = run_lumen("run", "-m", pkg, *rest, "--tokens", TOKENS, "-n", "4")
    ref = run_lumen("run", "-m", gguf, "--tokens", TOKENS, "-n", "4")
    assert ours.returncode == 0 and ref.returncode == 0, describe(ours) + describe(ref)
    # " the capital of": the first tokens of both (different quantizations agree on decisive steps).
    assert json.loads(ours.stdout)[:3] == json.loads(ref.stdout)[:3], (ours.stdout, ref.stdout)
