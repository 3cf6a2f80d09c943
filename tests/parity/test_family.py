"""The Gemma 4 family beyond the 12B shape, against transformers' own models/gemma4.

Tiny checkpoints built by transformers itself (tools/make_tiny_gemma4.py), one per feature and one
with everything:
  tiny-ple          per-layer input embeddings (the E2B/E4B table, projection, per-layer gates)
  tiny-kvshare      KV sharing (the last layers read an earlier layer's keys and values)
  tiny-ple-kvshare  both (E4B's layout)
  tiny-doublewide   KV sharing with the double-wide MLP of the shared layers
  tiny-e2b          per-layer inputs, KV sharing and the double-wide MLP (E2B's layout)
  tiny-moe-k1/k2/k5 mixture of experts (26B-A4B's router, experts and dense branch), top-1/2/5
  tiny-all          all of the above at once, k == v on full layers
Checked for each (bf16 weights, computed in f32 on both sides):
  * logits of every position of a 64-token sequence within 1e-4 (max|lumen - ref| / max|ref|);
  * 32 greedy tokens identical (prompts with an unambiguous reference continuation);
  * a packed copy (`lumen convert --quant f32`) gives the same logits bit for bit.
The per-layer input table's caches (tiny-ple-kvshare): row cache hits, misses, eviction at the
byte and row limits, prefetch and the prepared-input cache all give bit-identical logits to no
cache, and `lumen logits --stats` counts them. An E2B-shaped manifest in the seed's schema
(tools/make_family_manifest.py) drives a run; `lumen inspect --manifest` reports every
session.perLayerInputs field of the seed and of tools/manifests/gemma-4-e2b-it.json as honoured or
checked. LiteRT-LM packages with the E2B and E4B layouts (tools/make_tiny_litertlm.py: decoder,
embedder and per-layer embedder sections) run, dequantized, bit-identical to their source after the
same quantization, by name and through a map file, and pass `lumen verify`. `lumen convert --synthetic` writes the E2B/E4B/26B-A4B/31B shapes' specs (inspected) and a
tiny synthetic model with every feature that runs.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import (REPO, TOOLS, describe, greedy_case, mk, model_dir, record, ref, run_lumen, shared_dir,
                      token_sequence, tokens_arg)
from litert_tiny import tiny_packages

REL_TOL = 1e-4
# The default path on the bf16 checkpoints: where the CPU has AVX-512 BF16 the matrices take the
# vdpbf16ps kernel, its activations rounded to 16 significant bits (measured: up to 1.4e-4 of the
# exact path on tiny-all); elsewhere it is the exact path.
FAST_REL_TOL = 1e-3
SEQ_LEN = 64
GREEDY_N = 32
VARIANTS = ["tiny-ple", "tiny-kvshare", "tiny-ple-kvshare", "tiny-doublewide", "tiny-e2b", "tiny-moe-k1",
            "tiny-moe-k2", "tiny-moe-k5", "tiny-all"]
sys.path.insert(0, str(TOOLS))
import make_family_manifest as mfm  # noqa: E402


def lumen_logits(tmp_path: Path, tag: str, tokens, *args) -> np.ndarray:
    out = tmp_path / f"{tag}.npy"
    cp = run_lumen("logits", "--tokens", tokens_arg(tokens), "--out", out, *args)
    assert cp.returncode == 0, describe(cp)
    return np.load(out)


def rel_diff(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max() / np.abs(want).max())


@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_matches_transformers(variant, tmp_path):
    mdir = model_dir(variant)
    pd = mk.PRESETS[variant]
    tokens = token_sequence(pd["vocab_size"], SEQ_LEN, seed=11)
    want = ref.logits(mdir, tokens)
    got = lumen_logits(tmp_path, "dir", tokens, "-m", mdir)
    exact = lumen_logits(tmp_path, "exact", tokens, "-m", mdir, "--exact")
    assert got.shape == want.shape
    # The exact path within 1e-4 of transformers, the default path near the exact one.
    rel = rel_diff(exact, want)
    fast_rel = rel_diff(got, exact)
    # The same logits from the packed copy, and from prefill chunks that split the KV-shared
    # layers' sources across steps.
    lmp = tmp_path / f"{variant}.lmp"
    cp = run_lumen("convert", mdir, lmp, "--quant", "f32")
    assert cp.returncode == 0, describe(cp)
    # The f32 copy holds the checkpoint's bf16 numbers: equal on the exact path (on the default path
    # the checkpoint's bf16 matrices take the vdpbf16ps kernel where the CPU has AVX-512 BF16).
    packed = lumen_logits(tmp_path, "lmp", tokens, "-m", lmp)
    chunked = lumen_logits(tmp_path, "chunked", tokens, "-m", mdir, "--prefill-chunk", "7")
    # Greedy: 32 tokens from the KV cache, identical to transformers' generate().
    prompt, want_ids, margin, used = greedy_case(mdir, pd["vocab_size"], SEQ_LEN, GREEDY_N, seed=21)
    run = run_lumen("run", "-m", mdir, "--tokens", tokens_arg(prompt), "-n", GREEDY_N)
    assert run.returncode == 0, describe(run)
    got_ids = json.loads(run.stdout.strip().splitlines()[-1])
    record("family", variant, dict(rel=rel, tol=REL_TOL, fast_rel=fast_rel, argmax_agree=float(np.mean(got.argmax(-1) == want.argmax(-1))),
                                   packed_equal=bool(np.array_equal(packed, exact)), chunked_rel=rel_diff(chunked, got),
                                   greedy_equal=got_ids == want_ids, greedy_margin=margin, prompt_seed=used))
    assert rel <= REL_TOL, f"{variant}: max|lumen-ref|/max|ref| = {rel:.3e}"
    assert fast_rel <= FAST_REL_TOL, f"{variant}: default path vs exact path {fast_rel:.3e}"
    assert np.array_equal(packed, exact), f"{variant}: the .lmp copy gives other logits ({rel_diff(packed, exact):.3e})"
    assert rel_diff(chunked, got) <= 1e-5
    assert got_ids == want_ids, f"{variant}: greedy\n lumen {got_ids}\n ref   {want_ids}"


# ----------------------------------------------------------------------------- per-layer input caches

CACHE_CASES = {
    "no cache": ["--ple-row-cache", "off", "--ple-prefetch", "off", "--ple-hot-cache", "off"],
    "row cache": ["--ple-row-cache", "512", "--ple-prefetch", "off", "--ple-hot-cache", "off"],
    "row cache at 3 rows' bytes": ["--ple-row-cache", "512", "--ple-row-cache-bytes", "ROW3", "--ple-prefetch", "off",
                                   "--ple-hot-cache", "off"],
    "row cache of 2 rows": ["--ple-row-cache", "2", "--ple-prefetch", "off", "--ple-hot-cache", "off"],
    "row cache + prefetch": ["--ple-row-cache", "512", "--ple-prefetch", "4", "--ple-hot-cache", "off"],
    "prefetch only": ["--ple-row-cache", "off", "--ple-prefetch", "2", "--ple-hot-cache", "off"],
    "prepared inputs": ["--ple-row-cache", "off", "--ple-prefetch", "off", "--ple-hot-cache", "64"],
    "resident table, all caches": ["--ple-table", "resident"],
}


def test_per_layer_input_caches_give_bit_identical_logits(tmp_path):
    mdir = model_dir("tiny-ple-kvshare")
    pd = mk.PRESETS["tiny-ple-kvshare"]
    base = token_sequence(pd["vocab_size"], 40, seed=3)
    tokens = base + base  # the second half repeats the first: hits for a cache that keeps them
    distinct = len(set(base))
    row_bytes = pd["num_hidden_layers"] * pd["hidden_size_per_layer_input"] * 4  # decoded f32 rows
    results, stats = {}, {}
    for name, args in CACHE_CASES.items():
        args = [a.replace("ROW3", str(3 * row_bytes)) for a in args]
        out = tmp_path / "c.npy"
        cp = run_lumen("logits", "-m", mdir, "--tokens", tokens_arg(tokens), "--out", out, "--prefill-chunk", "8",
                       "--stats", *args)
        assert cp.returncode == 0, describe(cp)
        results[name] = np.load(out)
        stats[name] = json.loads(cp.stderr.strip().splitlines()[-1])["per_layer_inputs"]
    record("family", "ple-caches", {k: {kk: v[kk] for kk in ("row_hits", "row_misses", "row_evictions", "hot_hits",
                                                            "rows_queued", "rows_prefetched", "table_bytes_read")}
                                    for k, v in stats.items()})
    want = results["no cache"]
    for name, got in results.items():
        assert got.tobytes() == want.tobytes(), f"{name}: logits differ from no cache"
    # The counters show each cache did its work.
    assert stats["no cache"]["row_misses"] == len(tokens) and stats["no cache"]["row_hits"] == 0
    assert stats["row cache"]["row_misses"] == distinct and stats["row cache"]["row_hits"] == len(tokens) - distinct
    s3 = stats["row cache at 3 rows' bytes"]
    assert s3["row_entries"] == 3 and s3["row_bytes"] == 3 * row_bytes and s3["row_evictions"] == s3["row_misses"] - 3
    assert stats["row cache of 2 rows"]["row_entries"] == 2 and stats["row cache of 2 rows"]["row_evictions"] > 0
    # Handing rows to the helper is deterministic; whether it decodes them before the forward
    # pass needs them depends on scheduling, so only the bound is checked.
    sp = stats["row cache + prefetch"]
    assert sp["rows_queued"] > 0 and sp["rows_prefetched"] <= sp["rows_queued"]
    assert stats["row cache"]["rows_queued"] == 0
    assert stats["prepared inputs"]["hot_hits"] == len(tokens) - distinct
    assert stats["prepared inputs"]["row_misses"] == distinct


# ----------------------------------------------------------------------------- LiteRT-LM packages

@pytest.mark.parametrize("preset", ["tiny-e2b", "tiny-ple-kvshare"])
def test_litert_packages_with_the_e2b_and_e4b_layouts(preset, tmp_path):
    pk = tiny_packages(preset)
    cp = run_lumen("inspect", pk / "tiny.litertlm", "--json")
    assert cp.returncode == 0, describe(cp)
    listing = cp.stdout
    for model_type in ("tf_lite_prefill_decode", "tf_lite_embedder", "tf_lite_per_layer_embedder"):
        assert model_type in listing, model_type
    cfg = ["--config", pk / "source-q" / "config.json"]
    tokens = token_sequence(512, 40, seed=3)
    want = lumen_logits(tmp_path, "src", tokens, "-m", pk / "source-q")
    for variant, extra in [("tiny", []), ("tiny-unnamed", ["--map", pk / "tiny-unnamed.map.json"])]:
        exact = lumen_logits(tmp_path, variant, tokens, "-m", pk / f"{variant}.litertlm", *cfg, *extra, "--quant", "f32")
        assert np.array_equal(exact, want), f"{preset}/{variant}: {rel_diff(exact, want):.3e}"
        # On the int8 kernels (Q4_0X4/Q8_0X4 matrices, the table as Q8_0 rows: its values exact): the
        # int8 activations' noise only, which this random hidden-64 model amplifies (measured: up to
        # 0.39 x the logit std, top-1 agreement 0.95 (E2B layout) and 0.875 (E4B) over 40 positions).
        kern = lumen_logits(tmp_path, variant + "-k", tokens, "-m", pk / f"{variant}.litertlm", *cfg, *extra)
        assert np.abs(kern - want).max() <= 0.5 * want.std()
        assert np.mean(kern.argmax(-1) == want.argmax(-1)) >= 0.8
        receipt = tmp_path / f"{variant}.receipt.json"
        v = run_lumen("verify", pk / f"{variant}.litertlm", "--against", pk / "source-q", *extra, "--out", receipt)
        assert v.returncode == 0 and "verdict: PASS" in v.stdout, describe(v)
        r = json.loads(receipt.read_text())
        roles = {t["role"] for t in r["tensors"]}
        assert {"embed_tokens_per_layer", "per_layer_model_projection", "per_layer_input_gate"} <= roles
        assert all(t["match"] for t in r["tensors"])
    # The manifest of the package (the seed's schema with the E2B/E4B fields) with its receipt.
    m = run_lumen("logits", "--manifest", pk / "tiny-manifest.json", "--weights", pk / "tiny.litertlm",
                  "--receipt", tmp_path / "tiny.receipt.json", "--tokens", tokens_arg(tokens), "--out",
                  tmp_path / "m.npy", "--quant", "f32")
    assert m.returncode == 0, describe(m)


# ----------------------------------------------------------------------------- manifests

def test_e2b_shaped_manifest_drives_a_run(tmp_path):
    mdir = model_dir("tiny-all")
    cfg = json.loads((mdir / "config.json").read_text())
    seed = json.loads((shared_dir() / "manifests" / "litert-gemma-4-12b-it.json").read_text())
    manifest = mfm.manifest_for(cfg, seed, "test/tiny-all", "litert/gemma-4-e2b-it")
    m = tmp_path / "tiny-all.manifest.json"
    m.write_text(json.dumps(manifest))
    tokens = token_sequence(cfg["vocab_size"], SEQ_LEN, seed=5)
    plain = lumen_logits(tmp_path, "plain", tokens, "-m", mdir, "--kv-dtype", "f16", "--kv-layout", "contiguous")
    via = lumen_logits(tmp_path, "via", tokens, "--manifest", m, "--weights", mdir)
    # The manifest's session (f16 contiguous KV, the seed's perLayerInputs block) is the run's.
    assert np.array_equal(plain, via)
    ids = run_lumen("run", "--manifest", m, "--weights", mdir, "--tokens", tokens_arg(tokens[:20]), "-n", "8")
    assert ids.returncode == 0, describe(ids)
    summary = [l for l in ids.stderr.splitlines() if l.startswith("lumen: manifest ")]
    assert summary and "0 refused" in summary[0] and "per-layer inputs: table mapped; row cache lru 512 rows" in summary[0]
    # A manifest whose per-layer input width contradicts the weights is refused, naming the field.
    bad = json.loads(json.dumps(manifest))
    bad["runtime"]["architecture"]["hiddenSizePerLayerInput"] = 16
    bad["runtime"]["rawConfig"]["text_config"]["hidden_size_per_layer_input"] = 16
    b = tmp_path / "bad.json"
    b.write_text(json.dumps(bad))
    r = run_lumen("logits", "--manifest", b, "--weights", mdir, "--tokens", "2,5", "--out", tmp_path / "x.npy")
    assert r.returncode == 1 and "runtime.architecture.hiddenSizePerLayerInput 16 does not match" in r.stderr, r.stderr


def per_layer_input_fields(manifest: Path) -> list[dict]:
    cp = run_lumen("inspect", "--manifest", manifest, "--json")
    assert cp.returncode == 0, describe(cp)
    fields = json.loads(cp.stdout)["fields"]
    return [f for f in fields if ".session.perLayerInputs." in f["path"]]


def test_inspect_reports_every_per_layer_input_field():
    seed = per_layer_input_fields(shared_dir() / "manifests" / "litert-gemma-4-12b-it.json")
    e2b = per_layer_input_fields(REPO / "tools" / "manifests" / "gemma-4-e2b-it.json")
    assert len(seed) == 13 and len(e2b) == 13
    for f in seed + e2b:
        assert f["status"] in ("honoured", "checked"), f
        assert f["note"], f
    by_path = {f["path"].split("perLayerInputs.")[1]: f for f in e2b}
    assert by_path["rowCache.maxBytes"]["status"] == "honoured"
    assert by_path["materialization"]["status"] == "checked" and "GPU" in by_path["materialization"]["note"]
    assert by_path["gpuUpload.stagingRows"]["status"] == "checked"
    # The 12B has no per-layer inputs: checked, and the reason says so.
    assert all(f["status"] == "checked" for f in seed)
    assert any("no per-layer inputs" in f["note"] for f in seed)


# ----------------------------------------------------------------------------- synthetic shapes

@pytest.mark.parametrize("name,layers,shared,experts", [
    ("gemma-4-e2b-shapes.json", 35, 20, 0), ("gemma-4-e4b-shapes.json", 42, 18, 0),
    ("gemma-4-26b-a4b-shapes.json", 30, 0, 128), ("gemma-4-31b-shapes.json", 60, 0, 0)])
def test_family_shapes_build_specs(name, layers, shared, experts):
    cp = run_lumen("inspect", REPO / "tools" / "configs" / name, "--json")
    assert cp.returncode == 0, describe(cp)
    spec = json.loads(cp.stdout)
    assert spec["num_layers"] == layers
    assert sum(1 for l in spec["layers"] if l["kv_source"] is not None) == shared
    assert {l["num_experts"] for l in spec["layers"]} == {experts}


def test_synthetic_model_with_every_feature_runs(tmp_path):
    cfg = json.loads((REPO / "tools" / "configs" / "gemma-4-e2b-shapes.json").read_text())
    # E2B's layout at a tiny size, with experts too.
    cfg.update(hidden_size=64, intermediate_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
               global_head_dim=64, vocab_size=512, vocab_size_per_layer_input=512, hidden_size_per_layer_input=32,
               enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=32, sliding_window=16,
               layer_types=cfg["layer_types"][:10], num_kv_shared_layers=4, num_hidden_layers=10)
    c = tmp_path / "config.json"
    c.write_text(json.dumps(cfg))
    for quant in ("q4", "q8"):
        out = tmp_path / f"tiny-{quant}.lmp"
        cp = run_lumen("convert", "--synthetic", c, out, "--quant", quant)
        assert cp.returncode == 0, describe(cp)
        run = run_lumen("run", "-m", out, "--tokens", "2,17,300,45", "-n", "6")
        assert run.returncode == 0, describe(run)
        ids = json.loads(run.stdout.strip().splitlines()[-1])
        assert len(ids) == 6 and all(0 <= i < 512 for i in ids)
        bench = run_lumen("bench", "-m", out, "-p", "16", "-n", "8", "--limits", write_limits(tmp_path), "--json")
        assert bench.returncode == 0, describe(bench)
        b = json.loads(bench.stdout)
        assert b["decode"]["expert_bytes_per_token"] > 0
        assert b["decode"]["counters"]["per_layer_inputs"]["row_hits"] + \
            b["decode"]["counters"]["per_layer_inputs"]["row_misses"] > 0


def write_limits(tmp_path: Path) -> Path:
    p = tmp_path / "limits.json"
    p.write_text(json.dumps({"read_bandwidth_gbs": 10.0, "int8_peak_gops": 100.0, "threads": 2, "isa": "test"}))
    return p
