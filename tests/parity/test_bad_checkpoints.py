"""`lumen` must refuse broken checkpoints cleanly, and `lumen inspect` must describe the LiteRT manifest.

Each case copies a good tiny-mixed checkpoint (bf16, one model.safetensors), breaks one thing, and
runs `lumen logits -m DIR --tokens 2,5,6 --out OUT/x.npy`. Contract: exit code 1, exactly one
line on stderr, starting "lumen: error: ", naming the file and (where relevant) the tensor or
field; nothing left in OUT.
"""
from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import describe, model_dir, run_lumen

PREFIX = "lumen: error: "
MISSING = "model.layers.1.self_attn.q_proj.weight"
RESHAPED = "model.layers.0.input_layernorm.weight"
RETYPED = "model.layers.0.mlp.up_proj.weight"
ST = "model.safetensors"


@pytest.fixture(scope="module")
def good():
    d = model_dir("tiny-mixed")
    assert sorted(p.name for p in d.glob("*.safetensors")) == [ST]
    return d


def _copy(good: Path, dst: Path) -> Path:
    shutil.copytree(good, dst, ignore=shutil.ignore_patterns(".lumen-built"))
    return dst


def _rewrite(d: Path, fn) -> None:
    tensors = load_file(str(d / ST))
    fn(tensors)
    save_file(tensors, str(d / ST), metadata={"format": "pt"})


def _header_span(path: Path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return raw, 8, 8 + n


# --- corruptions: each returns (what must appear in the message: a list of alternatives per item)

def missing_tensor(d: Path):
    _rewrite(d, lambda t: t.pop(MISSING))
    return [[ST, d.name], [MISSING]]


def wrong_shape(d: Path):
    def f(t):
        w = t[RESHAPED]
        t[RESHAPED] = torch.cat([w, w[:1]])  # one element too many
    _rewrite(d, f)
    return [[ST], [RESHAPED]]


def wrong_dtype(d: Path):
    def f(t):
        t[RETYPED] = (t[RETYPED].float() * 100).to(torch.int32)
    _rewrite(d, f)
    return [[ST], [RETYPED]]


def truncated(d: Path):
    p = d / ST
    raw = p.read_bytes()
    p.write_bytes(raw[:-100])
    return [[ST]]


def bad_json_header(d: Path):
    p = d / ST
    raw, a, b = _header_span(p)
    hdr = bytearray(raw[a:b])
    i = hdr.index(b'":')  # the colon after the first key
    hdr[i + 1] = ord("#")
    json_ok = True
    try:
        json.loads(bytes(hdr))
    except ValueError:
        json_ok = False
    assert not json_ok, "corruption left the header valid JSON"
    p.write_bytes(raw[:a] + bytes(hdr) + raw[b:])
    assert p.stat().st_size == len(raw)
    return [[ST]]


def unknown_model_type(d: Path):
    p = d / "config.json"
    cfg = json.loads(p.read_text())
    cfg["model_type"] = "llama"
    p.write_text(json.dumps(cfg, indent=2))
    return [["config.json"], ["model_type", "llama"]]


def config_not_json(d: Path):
    (d / "config.json").write_text('{"model_type": "gemma4_text", this is not json\n')
    return [["config.json"]]


CASES = {
    "missing-tensor": missing_tensor,
    "wrong-shape": wrong_shape,
    "wrong-dtype-int32": wrong_dtype,
    "truncated": truncated,
    "bad-json-header": bad_json_header,
    "config-unknown-model-type": unknown_model_type,
    "config-not-json": config_not_json,
}


def test_good_checkpoint_control(good, tmp_path):
    """The untouched copy loads: the failures below are caused by the corruption."""
    d = _copy(good, tmp_path / "good")
    out = tmp_path / "out"
    out.mkdir()
    cp = run_lumen("logits", "-m", d, "--tokens", "2,5,6", "--out", out / "x.npy")
    assert cp.returncode == 0, describe(cp)
    a = np.load(out / "x.npy")
    assert a.dtype == np.float32 and a.shape == (3, 512), (a.dtype, a.shape)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_checkpoint_is_refused(good, tmp_path, case):
    d = _copy(good, tmp_path / f"ckpt-{case}")
    must_name = CASES[case](d)
    out = tmp_path / "out"
    out.mkdir()
    cp = run_lumen("logits", "-m", d, "--tokens", "2,5,6", "--out", out / "x.npy")
    info = describe(cp)
    assert cp.returncode == 1, f"{case}: want exit code 1\n{info}"
    lines = cp.stderr.splitlines()
    assert len(lines) == 1, f"{case}: want exactly one stderr line, got {len(lines)}\n{info}"
    line = lines[0]
    assert line.startswith(PREFIX), f"{case}: stderr must start with {PREFIX!r}\n{info}"
    for alternatives in must_name:
        assert any(a in line for a in alternatives), f"{case}: message must name one of {alternatives}: {line!r}"
    left = sorted(p.name for p in out.iterdir())
    assert left == [], f"{case}: output left behind: {left}"


# --- lumen inspect on the LiteRT manifest

MANIFEST = "manifests/litert-gemma-4-12b-it.json"
UNSUPPORTED_CODE = "gemma4-12b-litert-direct-source-unverified"


def _manifest(shared: Path) -> Path:
    p = shared / MANIFEST
    assert p.is_file(), f"missing {p} (LUMEN_SHARED_DIR={shared})"
    return p


def test_inspect_manifest_text(shared):
    cp = run_lumen("inspect", _manifest(shared))
    assert cp.returncode == 0, describe(cp)
    assert re.search(r"\b47\b[^\n]*layer|layer[^\n]*\b47\b", cp.stdout, re.IGNORECASE), \
        f"stdout does not mention 47 layers\n{describe(cp)}"
    assert UNSUPPORTED_CODE in cp.stdout, f"stdout does not mention {UNSUPPORTED_CODE}\n{describe(cp)}"


def _find_key(obj, key):
    """The first value under `key` anywhere in a JSON tree (breadth first)."""
    queue = [obj]
    while queue:
        o = queue.pop(0)
        if isinstance(o, dict):
            if key in o:
                return o[key]
            queue.extend(o.values())
        elif isinstance(o, list):
            queue.extend(o)
    return None


def test_inspect_manifest_json(shared):
    manifest = _manifest(shared)
    cp = run_lumen("inspect", "--json", manifest)
    assert cp.returncode == 0, describe(cp)
    try:
        doc = json.loads(cp.stdout)
    except json.JSONDecodeError as e:
        raise AssertionError(f"`inspect --json` stdout is not JSON: {e}\n{describe(cp)}") from e

    src = json.loads(manifest.read_text())
    want_kinds = ["full" if t == "full_attention" else "sliding"
                  for t in src["runtime"]["rawConfig"]["text_config"]["layer_types"]]
    assert len(want_kinds) == 47

    layers = doc.get("layers") if isinstance(doc, dict) else None
    if layers is None:
        layers = _find_key(doc, "layers")
    assert isinstance(layers, list), f"no `layers` array in inspect --json output: {cp.stdout[:500]}"
    assert len(layers) == 47, f"{len(layers)} layers, want 47"
    kinds = [lyr.get("kind") for lyr in layers]
    assert kinds == want_kinds, f"layer kinds {kinds} != manifest layer_types {want_kinds}"
    for i, lyr in enumerate(layers):
        hd, kv = lyr.get("head_dim"), lyr.get("num_kv_heads")
        if lyr["kind"] == "sliding":
            assert (hd, kv) == (256, 8), f"layer {i} (sliding): head_dim {hd}, num_kv_heads {kv}; want 256, 8"
        else:
            assert (hd, kv) == (512, 1), f"layer {i} (full): head_dim {hd}, num_kv_heads {kv}; want 512, 1"

    unsupported = doc.get("unsupported") if isinstance(doc, dict) else None
    if unsupported is None:
        unsupported = _find_key(doc, "unsupported")
    assert isinstance(unsupported, dict) and unsupported.get("code") == UNSUPPORTED_CODE, \
        f"unsupported.code is not {UNSUPPORTED_CODE}: {unsupported!r}"


# --- bad requests against a good checkpoint

BAD_REQUESTS = {
    # token list that is not integers -> names the option and the item
    "non-integer token": (["logits", "--tokens", "2,abc,6"], ["--tokens", "'abc'"]),
    "empty token item": (["logits", "--tokens", "2,,6"], ["--tokens"]),
    # token id past the vocabulary (512 in tiny-mixed) -> names the id and the vocabulary size
    "token outside vocabulary": (["logits", "--tokens", "2,512,6"], ["512", "vocabulary"]),
    "greedy token outside vocabulary": (["run", "--tokens", "2,9999", "-n", "3"], ["9999", "vocabulary"]),
    "model path is not a directory": (["run", "--tokens", "2,5", "-n", "1"], ["not a model directory"]),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_request_is_refused(good, tmp_path, case):
    args, must_contain = BAD_REQUESTS[case]
    model = tmp_path / "no-such-model" if case == "model path is not a directory" else good
    out = tmp_path / "out"
    out.mkdir()
    cmd = [args[0], "-m", model, *args[1:]]
    if args[0] == "logits":
        cmd += ["--out", out / "x.npy"]
    cp = run_lumen(*cmd)
    info = describe(cp)
    assert cp.returncode == 1, f"{case}: want exit code 1\n{info}"
    lines = cp.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX), f"{case}: want one '{PREFIX}' line\n{info}"
    for piece in must_contain:
        assert piece in lines[0], f"{case}: message must contain {piece!r}: {lines[0]!r}"
    assert sorted(p.name for p in out.iterdir()) == [], f"{case}: output left behind"
