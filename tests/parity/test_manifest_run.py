"""Manifest-driven runs: `lumen logits|run|chat|serve --manifest M --weights W` and `lumen inspect --manifest`.

The model is the tiny Gemma 4 checkpoint of the parity tests (tiny-mixed, float32); its manifest is derived
from its config.json here and carries the seed manifest's `unsupported` block and `session` block (f16,
contiguous KV). Checked:
  * with lossless session settings (f32 KV, paged as the plain path) the logits equal the plain path's
    bit for bit; contiguous equals paged to 1e-6 relative; other prefill chunks to 1e-5 relative;
  * the seed's session block (f16 KV) is honoured: the logits move, and stay within 0.05 absolute
    (relative to logits of std ~3) with top-1 agreement >= 0.97 over 64 positions; paged f16 equals
    contiguous f16 to 5e-4 relative;
  * the `unsupported` gate: refused with code, message and recommendation, exit 1, one line; with
    --allow-unverified it runs. The seed manifest itself: refused by logits/run/chat/serve; allowed, it
    fails with one line naming numLayers, on the tiny weights (6 layers) and on a 12B-shaped config (48);
  * the field table: every leaf of the manifest once, counts in text, JSON and the run's stderr summary;
  * bad manifest values and bad flags: exit 1, one `lumen: error:` line naming the field or flag,
    nothing written.
"""
from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, model_dir, run_lumen, shared_dir, token_sequence, tokens_arg, work_dir
from tokenizer_refs import gemma3_tokenizer_json

SEED = shared_dir() / "manifests" / "litert-gemma-4-12b-it.json"
F16_ABS_TOL = 0.05      # f16 keys/values: |logit diff| bound (logits of std ~3)
CHUNK_REL_TOL = 1e-5    # other prefill chunking: summation order only
LAYOUT_REL_TOL = 1e-6   # contiguous vs paged f32 cache
F16_LAYOUT_REL_TOL = 5e-4  # contiguous vs paged f16 cache


def seed() -> dict:
    return json.loads(SEED.read_text())


def leaves(node, path=""):
    if isinstance(node, dict) and node:
        for k, v in node.items():
            yield from leaves(v, f"{path}.{k}" if path else k)
    else:
        yield path


@pytest.fixture(scope="module")
def weights() -> Path:
    return model_dir("tiny-mixed", dtype="float32")


def tiny_manifest(weights: Path, *, session: dict | None = None, unsupported: bool = True) -> dict:
    """A doppler.execution/v1 manifest describing the tiny checkpoint, with the seed's session block."""
    cfg = json.loads((weights / "config.json").read_text())
    s = seed()
    mi = s["runtime"]["manifestInference"]
    full = cfg["rope_parameters"]["full_attention"]
    local = cfg["rope_parameters"]["sliding_attention"]
    manifest_inference = {
        "schema": "doppler.execution/v1",
        "attention": dict(mi["attention"], slidingWindow=cfg["sliding_window"], queryKeyNormWeightLayers=None),
        "normalization": dict(mi["normalization"], rmsNormEps=cfg["rms_norm_eps"]),
        "ffn": mi["ffn"],
        "rope": dict(mi["rope"], ropeTheta=full["rope_theta"], ropeLocalTheta=local["rope_theta"],
                     partialRotaryFactor=full["partial_rotary_factor"], ropeFrequencyBaseDim=cfg["global_head_dim"]),
        "output": dict(mi["output"], finalLogitSoftcapping=cfg["final_logit_softcapping"],
                       embeddingVocabSize=cfg["vocab_size"]),
        "layerPattern": dict(mi["layerPattern"], layerTypes=cfg["layer_types"]),
        "chatTemplate": mi["chatTemplate"],
        "pipeline": None,
        "session": copy.deepcopy(session if session is not None else mi["session"]),
    }
    if unsupported:
        manifest_inference["unsupported"] = mi["unsupported"]
    return {
        "id": "test/tiny-mixed",
        "runtime": {
            "modelType": "gemma4",
            "architecture": {
                "vocabSize": cfg["vocab_size"], "hiddenSize": cfg["hidden_size"],
                "intermediateSize": cfg["intermediate_size"], "numLayers": cfg["num_hidden_layers"],
                "numAttentionHeads": cfg["num_attention_heads"], "numKeyValueHeads": cfg["num_key_value_heads"],
                "numGlobalKeyValueHeads": cfg["num_global_key_value_heads"], "headDim": cfg["head_dim"],
                "globalHeadDim": cfg["global_head_dim"], "hiddenSizePerLayerInput": 0,
                "vocabSizePerLayerInput": 0, "numKvSharedLayers": 0,
                "attentionKeyEqualsValue": cfg["attention_k_eq_v"], "maxSeqLen": cfg["max_position_embeddings"],
            },
            "rawConfig": {"architectures": cfg["architectures"], "model_type": "gemma4",
                          "text_config": {k: v for k, v in cfg.items() if k != "architectures"}},
            "manifestInference": manifest_inference,
            "tokenizer": {"litertlm": dict(s["runtime"]["tokenizer"]["litertlm"], vocabSize=cfg["vocab_size"],
                                           eosTokens=[1])},
        },
    }


def kv_session(kv_dtype: str, layout: str = "paged") -> dict:
    s = copy.deepcopy(seed()["runtime"]["manifestInference"]["session"])
    s["kvcache"]["kvDtype"] = kv_dtype
    s["kvcache"]["layout"] = layout
    return s


def write(tmp_path: Path, name: str, manifest: dict) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(manifest))
    return p


TOKENS = token_sequence(512, 64, seed=5)


def logits(tmp_path: Path, tag: str, *args) -> np.ndarray:
    out = tmp_path / f"{tag}.npy"
    r = run_lumen("logits", "--tokens", tokens_arg(TOKENS), "--out", out, *args)
    assert r.returncode == 0, r.stderr
    return np.load(out)


def one_error_line(r, *needles):
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lumen: error: "), r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


# ----------------------------------------------------------------------------------- numerics

def test_manifest_spec_equals_the_config_spec(weights, tmp_path):
    m = write(tmp_path, "m.json", tiny_manifest(weights))
    a = json.loads(run_lumen("inspect", m, "--json").stdout)
    b = json.loads(run_lumen("inspect", weights, "--json").stdout)
    for key in ("source", "source_kind", "notes", "unsupported", "tokens", "model_type"):
        a.pop(key, None)
        b.pop(key, None)
    assert a == b


def test_lossless_settings_equal_the_plain_path_exactly(weights, tmp_path):
    plain = logits(tmp_path, "plain", "-m", weights)
    m = write(tmp_path, "f32.json", tiny_manifest(weights, session=kv_session("f32", "paged")))
    via_manifest = logits(tmp_path, "manifest", "--manifest", m, "--weights", weights, "--allow-unverified")
    assert np.array_equal(plain, via_manifest)
    # The seed's session (f16) overridden by flags back to the lossless settings: the same bits.
    seed_session = write(tmp_path, "seed-session.json", tiny_manifest(weights))
    flagged = logits(tmp_path, "flags", "--manifest", seed_session, "--weights", weights, "--allow-unverified",
                     "--kv-dtype", "f32", "--kv-layout", "paged")
    assert np.array_equal(plain, flagged)


def test_f16_kv_of_the_seed_session_is_honoured_and_close(weights, tmp_path):
    plain = logits(tmp_path, "plain", "-m", weights)
    m = write(tmp_path, "f16.json", tiny_manifest(weights))  # kvDtype f16, contiguous
    f16 = logits(tmp_path, "f16", "--manifest", m, "--weights", weights, "--allow-unverified")
    diff = np.abs(f16 - plain).max()
    assert diff > 0, "f16 KV gave the f32 logits bit for bit: the manifest's kvDtype was not applied"
    assert diff < F16_ABS_TOL, diff
    assert np.mean(f16.argmax(-1) == plain.argmax(-1)) >= 0.97
    # Paged f16 against contiguous f16: the same f16 rows, read back through another path (measured
    # 2.0e-4 relative; docs/kv.md states 3e-3 absolute on logits up to 30 for the same comparison).
    paged = logits(tmp_path, "f16p", "--manifest", m, "--weights", weights, "--allow-unverified", "--kv-layout", "paged")
    assert np.abs(paged - f16).max() <= F16_LAYOUT_REL_TOL * np.abs(f16).max()


def test_packed_weights_and_bare_safetensors(weights, tmp_path):
    # A packed .lmp (lumen convert) as the weights: the same bits as running the .lmp plainly.
    lmp = tmp_path / "tiny.lmp"
    r = run_lumen("convert", weights, lmp, "--quant", "f32")
    assert r.returncode == 0, r.stderr
    m = write(tmp_path, "f32.json", tiny_manifest(weights, session=kv_session("f32", "paged")))
    plain = logits(tmp_path, "lmp", "-m", lmp)
    via = logits(tmp_path, "lmpm", "--manifest", m, "--weights", lmp, "--allow-unverified")
    assert np.array_equal(plain, via)
    # A directory of bare safetensors (no config.json): the manifest is the only description.
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "model.safetensors").symlink_to((weights / "model.safetensors").resolve())
    assert np.array_equal(logits(tmp_path, "bare", "--manifest", m, "--weights", bare, "--allow-unverified"),
                          logits(tmp_path, "dir", "-m", weights))


def test_paged_equals_contiguous_and_chunking_only_reorders_sums(weights, tmp_path):
    m = write(tmp_path, "f32c.json", tiny_manifest(weights, session=kv_session("f32", "contiguous")))
    base = ["--manifest", m, "--weights", weights, "--allow-unverified"]
    contiguous = logits(tmp_path, "c", *base)
    paged = logits(tmp_path, "p", *base, "--kv-layout", "paged", "--page-size", "4")
    scale = np.abs(contiguous).max()
    assert np.abs(paged - contiguous).max() <= LAYOUT_REL_TOL * scale
    chunked = logits(tmp_path, "ch", *base, "--prefill-chunk", "5")
    assert np.abs(chunked - contiguous).max() <= CHUNK_REL_TOL * scale
    # The manifest's tiering: a cold int8 tier (blocks of 8) behind a hot window of 8, pages of 4.
    session = kv_session("f32", "paged")
    session["kvcache"]["pageSize"] = 4
    session["kvcache"]["tiering"].update(mode="on", hotWindow=8, coldPageSize=4,
                                         compression=dict(mode="int8", blockSize=8, bitWidth=8, prodMode=False))
    t = write(tmp_path, "tiered.json", tiny_manifest(weights, session=session))
    tiered = logits(tmp_path, "t", "--manifest", t, "--weights", weights, "--allow-unverified")
    assert not np.array_equal(tiered, paged), "int8 cold pages gave the f32 logits: tiering was not applied"
    assert np.mean(tiered.argmax(-1) == paged.argmax(-1)) >= 0.9
    # --kv-cold f32 on the same manifest: a lossless cold tier, the paged f32 logits again.
    lossless = logits(tmp_path, "tl", "--manifest", t, "--weights", weights, "--allow-unverified", "--kv-cold", "f32")
    assert np.abs(lossless - paged).max() <= LAYOUT_REL_TOL * scale


def test_greedy_run_with_the_manifest_equals_the_plain_run(weights, tmp_path):
    m = write(tmp_path, "f32.json", tiny_manifest(weights, session=kv_session("f32", "paged")))
    prompt = tokens_arg(TOKENS[:20])
    plain = run_lumen("run", "-m", weights, "--tokens", prompt, "-n", "12")
    via = run_lumen("run", "--manifest", m, "--weights", weights, "--allow-unverified", "--tokens", prompt, "-n", "12",
                    "--prefill-chunk", "7")
    assert plain.returncode == 0 and via.returncode == 0, via.stderr
    assert json.loads(plain.stdout) == json.loads(via.stdout)
    # The one-line summary of the field table and the session on stderr.
    summary = [l for l in via.stderr.splitlines() if l.startswith("lumen: manifest ")]
    assert len(summary) == 1 and " fields: " in summary[0] and "0 refused" in summary[0]
    assert "session: KV paged f32" in summary[0] and "prefill chunks of 7" in summary[0]
    verbose = run_lumen("run", "--manifest", m, "--weights", weights, "--allow-unverified", "--tokens", prompt,
                        "-n", "2", "--verbose")
    assert verbose.returncode == 0
    table = json.loads(run_lumen("inspect", "--manifest", m, "--json").stdout)
    assert sum(1 for l in verbose.stderr.splitlines() if l.startswith("  honoured ")) == table["counts"]["honoured"]


# ----------------------------------------------------------------------------------- the gate

def test_unsupported_block_is_refused_then_allowed(weights, tmp_path):
    m = write(tmp_path, "m.json", tiny_manifest(weights, session=kv_session("f32")))
    u = seed()["runtime"]["manifestInference"]["unsupported"]
    r = run_lumen("logits", "--manifest", m, "--weights", weights, "--tokens", "2,5,9", "--out", tmp_path / "x.npy")
    one_error_line(r, u["code"], u["message"], "recommendation: " + u["recommendation"], "--allow-unverified")
    assert not (tmp_path / "x.npy").exists()
    ok = run_lumen("logits", "--manifest", m, "--weights", weights, "--tokens", "2,5,9", "--out", tmp_path / "x.npy",
                   "--allow-unverified")
    assert ok.returncode == 0, ok.stderr
    clean = write(tmp_path, "clean.json", tiny_manifest(weights, session=kv_session("f32"), unsupported=False))
    assert run_lumen("run", "--manifest", clean, "--weights", weights, "--tokens", "2,5", "-n", "2").returncode == 0


def test_seed_manifest_is_refused_by_every_command(weights, tmp_path):
    u = seed()["runtime"]["manifestInference"]["unsupported"]
    for args in (["logits", "--tokens", "2", "--out", tmp_path / "s.npy"], ["run", "--tokens", "2"], ["chat"],
                 ["serve", "--port", "0"]):
        r = run_lumen(*args, "--manifest", SEED, "--weights", weights)
        one_error_line(r, u["code"], u["message"], u["recommendation"])


def test_seed_manifest_allowed_fails_only_on_the_layer_count(weights, tmp_path):
    # On the tiny weights: past the gate, the shapes are compared first.
    for args in (["logits", "--tokens", "2", "--out", tmp_path / "s.npy"], ["run", "--tokens", "2"], ["chat"],
                 ["serve", "--port", "0"]):
        r = run_lumen(*args, "--manifest", SEED, "--weights", weights, "--allow-unverified")
        one_error_line(r, "runtime.architecture.numLayers 47 does not match the weights' 6 layers")
    # On weights of the 12B source shape (48 layers; the description is enough: it is compared before
    # any tensor is read): exactly the LiteRT package's 47-vs-48 problem.
    w12 = tmp_path / "w12b"
    w12.mkdir()
    shutil.copy(REPO / "tools" / "configs" / "gemma-4-12b-shapes.json", w12 / "config.json")
    r = run_lumen("logits", "--manifest", SEED, "--weights", w12, "--allow-unverified", "--tokens", "2",
                  "--out", tmp_path / "s.npy")
    one_error_line(r, f"{SEED}: runtime.architecture.numLayers 47 does not match the weights' 48 layers")
    assert not (tmp_path / "s.npy").exists()


def test_seed_manifest_on_the_synthetic_12b_packed_model(tmp_path):
    lmp = Path("/work/models/synth-12b-q4.lmp")
    if not lmp.is_file():
        pytest.skip(f"{lmp} not present (made by `lumen convert --synthetic`, 6.7 GB; not created by tests)")
    r = run_lumen("logits", "--manifest", SEED, "--weights", lmp, "--allow-unverified", "--tokens", "2",
                  "--out", tmp_path / "s.npy")
    one_error_line(r, "runtime.architecture.numLayers 47 does not match the weights' 48 layers")


# ----------------------------------------------------------------------------------- field table

def test_field_table_of_the_seed_manifest():
    r = run_lumen("inspect", "--manifest", SEED, "--json")
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)
    paths = [f["path"] for f in t["fields"]]
    expected = list(leaves(seed()))
    assert sorted(paths) == sorted(expected) and len(paths) == len(set(paths))
    c = t["counts"]
    assert c["total"] == len(expected) == c["honoured"] + c["checked"] + c["ignored"] + c["refused"]
    assert c["refused"] == 0 and t["error"] is None
    by_path = {f["path"]: f for f in t["fields"]}
    assert by_path["runtime.architecture.numLayers"]["status"] == "checked"
    assert by_path["runtime.manifestInference.session.kvcache.kvDtype"]["status"] == "honoured"
    assert by_path["runtime.manifestInference.session.decodeLoop.readbackMode"]["status"] == "ignored"
    # No per-layer inputs in the 12B: that block is checked (tests/parity/test_family.py has more).
    assert by_path["runtime.manifestInference.session.perLayerInputs.gpuUpload.mode"]["status"] == "checked"
    assert all(f["note"] for f in t["fields"])
    text = run_lumen("inspect", "--manifest", SEED)
    assert text.returncode == 0
    first = text.stdout.splitlines()[0]
    assert first == (f"manifest {SEED}: {c['total']} fields: {c['honoured']} honoured, {c['checked']} checked, "
                     f"{c['ignored']} ignored, 0 refused")


# ----------------------------------------------------------------------------------- bad input

BAD_VALUES = [
    (("session", "compute", "defaults", "mathDtype"), "f16", "runtime.manifestInference.session.compute.defaults.mathDtype"),
    (("session", "kvcache", "kvDtype"), "f8", "runtime.manifestInference.session.kvcache.kvDtype"),
    (("session", "kvcache", "layout"), "contiguous_quantized", "runtime.manifestInference.session.kvcache.layout"),
    (("session", "kvcache", "tiering", "coldPageSize"), 128, "runtime.manifestInference.session.kvcache.tiering.coldPageSize"),
    (("session", "decodeLoop", "batchSize"), 0, "runtime.manifestInference.session.decodeLoop.batchSize"),
    (("session", "speculativeDecoding"), True, "runtime.manifestInference.session.speculativeDecoding"),
    (("rope", "ropeInterleaved"), True, "runtime.manifestInference.rope.ropeInterleaved"),
]


@pytest.mark.parametrize("keys,value,field", BAD_VALUES, ids=[b[2].rsplit(".", 1)[1] for b in BAD_VALUES])
def test_bad_manifest_values_are_one_line_errors_naming_the_field(weights, tmp_path, keys, value, field):
    m = tiny_manifest(weights)
    node = m["runtime"]["manifestInference"]
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    if keys[-2:] == ("tiering", "coldPageSize"):
        m["runtime"]["manifestInference"]["session"]["kvcache"]["layout"] = "paged"
    p = write(tmp_path, "bad.json", m)
    out = tmp_path / "bad.npy"
    r = run_lumen("logits", "--manifest", p, "--weights", weights, "--allow-unverified", "--tokens", "2,5",
                  "--out", out)
    one_error_line(r, field)
    assert not out.exists()
    # inspect --manifest shows the table with the field refused, and the same error.
    t = run_lumen("inspect", "--manifest", p, "--json")
    assert t.returncode == 1
    table = json.loads(t.stdout)
    assert table["counts"]["refused"] >= 1
    assert [f for f in table["fields"] if f["path"] == field][0]["status"] == "refused"


def test_shape_mismatch_with_the_weights_names_the_field(weights, tmp_path):
    m = tiny_manifest(weights)
    m["runtime"]["architecture"]["intermediateSize"] = 96
    m["runtime"]["rawConfig"]["text_config"]["intermediate_size"] = 96
    r = run_lumen("logits", "--manifest", write(tmp_path, "w.json", m), "--weights", weights, "--allow-unverified",
                  "--tokens", "2", "--out", tmp_path / "w.npy")
    one_error_line(r, "runtime.architecture.intermediateSize 96 does not match the weights' FFN width 128")


BAD_FLAGS = [("--kv-dtype", "f8"), ("--kv-layout", "ring"), ("--page-size", "0"), ("--kv-cold", "int3"),
             ("--hot-window", "-1"), ("--prefill-chunk", "x")]


@pytest.mark.parametrize("flag,value", BAD_FLAGS, ids=[f[0] for f in BAD_FLAGS])
def test_bad_session_flags_are_one_line_errors(weights, tmp_path, flag, value):
    out = tmp_path / "f.npy"
    one_error_line(run_lumen("logits", "-m", weights, "--tokens", "2", "--out", out, f"{flag}={value}"), flag)
    assert not out.exists()
    one_error_line(run_lumen("run", "-m", weights, "--tokens", "2", f"{flag}={value}"), flag)


def test_manifest_without_weights_and_unreadable_manifest(weights, tmp_path):
    one_error_line(run_lumen("run", "--manifest", SEED, "--tokens", "2"), "--weights")
    bad = tmp_path / "broken.json"
    bad.write_text("{ not json")
    one_error_line(run_lumen("run", "--manifest", bad, "--weights", weights, "--tokens", "2"), str(bad), "not valid JSON")


# ----------------------------------------------------------------------------------- text (Session)

@pytest.fixture(scope="module")
def text_weights() -> Path:
    """tiny-vocab262k plus the Gemma tokenizer.json (as test_text_cli does), in a folder of its own."""
    bare = model_dir("tiny-vocab262k")
    out = work_dir() / "models" / f"{bare.name}-manifest-text"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for f in bare.iterdir():
        if f.is_file() and not f.name.startswith("."):
            (out / f.name).symlink_to(f.resolve())
    (out / "tokenizer.json").symlink_to(gemma3_tokenizer_json().resolve())
    yield out
    shutil.rmtree(out, ignore_errors=True)


PROMPT = ["--raw", "-p", "The quick brown fox jumps over the lazy dog. Once upon a time", "--temp", "0", "-n", "16"]


def test_text_run_uses_the_manifest_session_and_checks_the_tokenizer(text_weights, tmp_path):
    plain = run_lumen("run", "-m", text_weights, *PROMPT)
    assert plain.returncode == 0, plain.stderr
    # The seed's tokenizer block says sentencepiece; this model's tokenizer is a tokenizer.json.
    m = tiny_manifest(text_weights, session=kv_session("f32", "paged"))
    one_error_line(run_lumen("run", "--manifest", write(tmp_path, "sp.json", m), "--weights", text_weights,
                             "--allow-unverified", *PROMPT),
                   "runtime.tokenizer.litertlm.type 'sentencepiece' does not match the loaded tokenizer (hf-bpe)")
    # Declared as bpe: the Gemma 3 tokenizer.json has 262145 entries, the block says 262144.
    m["runtime"]["tokenizer"]["litertlm"].update(type="bpe", addBosToken=True)
    one_error_line(run_lumen("run", "--manifest", write(tmp_path, "vocab.json", m), "--weights", text_weights,
                             "--allow-unverified", *PROMPT),
                   "runtime.tokenizer.litertlm.vocabSize 262144 does not match the loaded tokenizer's 262145 tokens")
    # Without a declared size, BOS added as the plain path does: the same text through Session.
    del m["runtime"]["tokenizer"]["litertlm"]["vocabSize"]
    same = run_lumen("run", "--manifest", write(tmp_path, "bpe.json", m), "--weights", text_weights,
                     "--allow-unverified", "--prefill-chunk", "5", *PROMPT)
    assert same.returncode == 0, same.stderr
    assert same.stdout == plain.stdout
    # addBosToken false (the seed's): the prompt starts without BOS, so the continuation is another one.
    m["runtime"]["tokenizer"]["litertlm"]["addBosToken"] = False
    no_bos = run_lumen("run", "--manifest", write(tmp_path, "nobos.json", m), "--weights", text_weights,
                       "--allow-unverified", *PROMPT)
    assert no_bos.returncode == 0, no_bos.stderr
    assert no_bos.stdout != plain.stdout
    # A wrong special id in the tokenizer block is named.
    m["runtime"]["tokenizer"]["litertlm"]["bosTokenId"] = 5
    m["runtime"]["rawConfig"]["text_config"]["bos_token_id"] = 5
    one_error_line(run_lumen("run", "--manifest", write(tmp_path, "bos.json", m), "--weights", text_weights,
                             "--allow-unverified", *PROMPT),
                   "runtime.tokenizer.litertlm.bosTokenId 5 does not match the loaded tokenizer's 2")
