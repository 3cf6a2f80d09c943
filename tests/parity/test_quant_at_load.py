"""`--quant TYPE` at load and `lumen convert --quant TYPE` hold exactly the weights of the GGUF that
`lumen quantize --type TYPE` writes from the same source: the same mix (llama.cpp's per-tensor
types) and the same quantizers, imatrix included. Checked bit for bit on the logits, which the
same kernels compute from the same bytes.

Sources, made deterministically by the test helpers:
  - the tiny Gemma 4 of tools/make_tiny_gemma4.py (preset tiny-k256: every row a whole number of
    256-blocks, so every K-quant applies) as the f32 checkpoint and as the F32 GGUF llama.cpp's
    converter writes of it (gemma4_gguf_support), with an imatrix `lumen imatrix` collects on KJV
    text. Per type: (a) `lumen quantize F32.gguf --type T` loaded, (b) F32.gguf --quant T,
    (c) the checkpoint --quant T, (d) `lumen convert CHECKPOINT --quant T` loaded: a = b = c = d;
  - a tiny Gemma 3 GGUF whose matrices are already Q8_0 / Q5_0 / Q4_0 / F16
    (tools/make_tiny_gemma3_gguf.py): --quant T equals `lumen quantize --allow-requantize`, which
    keeps a tensor already in its planned type and requantizes the rest from the exact expansion.
The short names are the mixes: q4 = Q4_K_M, q8 = Q8_0.

The mix on the Gemma 4 variants `lumen quantize` does not write yet (experts; per-layer inputs
with KV-shared blocks) is checked against llama.cpp's own: the type of every matrix in the .lmp
`lumen convert` writes equals the type llama-quantize (llama-cpp-python) gives the same tensor of
llama.cpp's conversion of the checkpoint, and on the expert model `--quant` on that GGUF equals
the .lmp bit for bit.
"""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

import gemma4_gguf as g4
import gemma4_gguf_support as support
from conftest import describe, run_lumen, token_sequence, tokens_arg, work_dir

import make_tiny_gemma3_gguf as mk3

TYPES = ["Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q4_K_M", "Q4_K_S", "Q4_0", "IQ4_XS"]
IMATRIX_TYPES = ["Q4_K_M", "Q4_0", "IQ4_XS"]
TOKENS = token_sequence(512, 24, seed=11)


def lumen(*args) -> None:
    cp = run_lumen(*args)
    assert cp.returncode == 0, describe(cp)


def logits(tmp_path: Path, model, *flags, tokens=TOKENS) -> np.ndarray:
    out = tmp_path / "logits.npy"
    lumen("logits", "-m", model, "--tokens", tokens_arg(tokens), "--out", out, *flags)
    x = np.load(out)
    out.unlink()
    return x


@pytest.fixture(scope="module")
def gemma4():
    f32, ckpt = support.gguf_file("F32"), support.hf_dir()
    bible = shutil.which("bible")
    if not bible:
        pytest.fail("the `bible` program is missing: run scripts/setup --test (Debian package bible-kjv)")
    d = work_dir() / "quant-at-load"
    d.mkdir(parents=True, exist_ok=True)
    text = d / "genesis.txt"
    text.write_text(subprocess.run([bible, "gen1:1-gen4:26"], capture_output=True, text=True, check=True).stdout)
    imatrix = d / "imatrix.gguf"
    lumen("imatrix", "-m", f32, "-f", text, "-o", imatrix, "--ctx", 64)
    return {"f32": f32, "ckpt": ckpt, "imatrix": imatrix}


@pytest.mark.parametrize("qtype,imatrix", [(t, False) for t in TYPES] + [(t, True) for t in IMATRIX_TYPES],
                         ids=TYPES + [f"{t}-imatrix" for t in IMATRIX_TYPES])
def test_quant_at_load_and_convert_equal_lumen_quantize(gemma4, qtype, imatrix, tmp_path):
    extra = ["--imatrix", gemma4["imatrix"]] if imatrix else []
    quantized = tmp_path / f"{qtype}.gguf"
    lumen("quantize", gemma4["f32"], quantized, "--type", qtype, *extra)
    want = logits(tmp_path, quantized)
    assert np.isfinite(want).all()
    got = {
        "F32 GGUF --quant": logits(tmp_path, gemma4["f32"], "--quant", qtype, *extra),
        "checkpoint --quant": logits(tmp_path, gemma4["ckpt"], "--quant", qtype.lower(), *extra),
    }
    packed = tmp_path / f"{qtype}.lmp"
    lumen("convert", gemma4["ckpt"], packed, "--quant", qtype, *extra)
    got["lumen convert"] = logits(tmp_path, packed)
    for what, x in got.items():
        assert np.array_equal(x, want), f"{qtype}{' + imatrix' if imatrix else ''}: {what} differs from lumen quantize " \
                                        f"(max |d| {np.abs(x - want).max():.3g})"
    if imatrix:  # the imatrix did something
        assert not np.array_equal(want, logits(tmp_path, gemma4["f32"], "--quant", qtype))


def test_short_names_are_the_mixes(gemma4, tmp_path):
    q4 = logits(tmp_path, gemma4["f32"], "--quant", "q4")
    assert np.array_equal(q4, logits(tmp_path, gemma4["f32"], "--quant", "Q4_K_M"))
    assert not np.array_equal(q4, logits(tmp_path, gemma4["f32"], "--quant", "Q4_0"))
    assert np.array_equal(logits(tmp_path, gemma4["f32"], "--quant", "q8"),
                          logits(tmp_path, gemma4["f32"], "--quant", "q8_0"))


@pytest.mark.parametrize("qtype", ["Q4_K_M", "Q8_0", "IQ4_XS"])
def test_requantizing_a_quantized_gguf_equals_lumen_quantize(qtype, tmp_path):
    src = tmp_path / "tiny3.gguf"
    mk3.build(src, seed=5, window=4, layers=6)
    quantized = tmp_path / "out.gguf"
    lumen("quantize", src, quantized, "--type", qtype, "--allow-requantize")
    tokens = token_sequence(mk3.VOCAB, 16, seed=2)
    want = logits(tmp_path, quantized, tokens=tokens)
    assert np.array_equal(logits(tmp_path, src, "--quant", qtype, tokens=tokens), want)
    assert not np.array_equal(logits(tmp_path, src, tokens=tokens), want)  # something was requantized


def test_bad_quant_names_and_imatrix_use_are_one_line_errors(gemma4, tmp_path):
    out = tmp_path / "x.npy"
    for flags, words in [(["--quant", "q3"], ["--quant", "'q3'", "Q4_K_M", "IQ4_XS", "q4 (= Q4_K_M)"]),
                         (["--quant", "f32", "--imatrix", gemma4["imatrix"]], ["--imatrix", "f32"]),
                         (["--imatrix", gemma4["imatrix"]], ["--imatrix", "--quant"]),
                         (["--quant", "q4", "--imatrix", tmp_path / "missing.gguf"], ["missing.gguf"])]:
        cp = run_lumen("logits", "-m", gemma4["f32"], "--tokens", "2,5", "--out", out, *flags)
        lines = cp.stderr.strip().splitlines()
        assert cp.returncode == 1 and len(lines) == 1 and lines[0].startswith("lumen: error: "), describe(cp)
        for w in words:
            assert str(w) in lines[0], describe(cp)
        assert not out.exists()
    # An imatrix of another model: its entries name tensors this model does not have (or
    # another row length).
    other = tmp_path / "other.gguf"
    mk3.build(other, seed=1, window=4, layers=2)
    other_im = tmp_path / "other-imatrix.gguf"
    text = tmp_path / "t.txt"
    text.write_text("w1 w2 w3 w4 w5 w6 w7 w8 " * 40)
    lumen("imatrix", "-m", other, "-f", text, "-o", other_im, "--ctx", 32)
    for cmd in (["logits", "-m", gemma4["f32"], "--tokens", "2,5", "--out", out, "--quant", "q4", "--imatrix", other_im],
                ["convert", gemma4["ckpt"], tmp_path / "x.lmp", "--quant", "q4", "--imatrix", other_im]):
        cp = run_lumen(*cmd)
        lines = cp.stderr.strip().splitlines()
        assert cp.returncode == 1 and len(lines) == 1, describe(cp)
        assert str(other_im) in lines[0] and "another model" in lines[0], describe(cp)
    assert not out.exists() and not (tmp_path / "x.lmp").exists()
    assert not list(tmp_path.glob("x.lmp.tmp-*"))


# Checkpoint names (as a .lmp keeps them, prefix removed) -> llama.cpp's GGUF names.
_GGUF_NAMES = {"self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
               "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
               "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
               "mlp.down_proj.weight": "ffn_down.weight", "router.proj.weight": "ffn_gate_inp.weight",
               "experts.gate_up_proj": "ffn_gate_up_exps.weight", "experts.down_proj": "ffn_down_exps.weight",
               "per_layer_input_gate.weight": "inp_gate.weight", "per_layer_projection.weight": "proj.weight",
               "embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight",
               "embed_tokens_per_layer.weight": "per_layer_token_embd.weight",
               "per_layer_model_projection.weight": "per_layer_model_proj.weight"}


def _gguf_name(checkpoint_name: str) -> str:
    name = checkpoint_name.removeprefix("model.language_model.").removeprefix("model.")
    if name.startswith("layers."):
        _, layer, rest = name.split(".", 2)
        return f"blk.{layer}.{_GGUF_NAMES[rest]}"
    return _GGUF_NAMES[name]


def _lmp_matrix_types(path: Path) -> dict:
    raw = path.read_bytes()
    (n,) = struct.unpack_from("<Q", raw, 16)
    header = json.loads(raw[24:24 + n])
    return {_gguf_name(t["name"]): t["format"].upper() for t in header["tensors"] if len(t["shape"]) > 1}


@pytest.mark.parametrize("preset", ["tiny-moe-k2", "tiny-ple-kvshare"])
@pytest.mark.parametrize("qtype", ["Q4_K_M", "IQ4_XS"])
def test_variant_mixes_are_llama_cpps(preset, qtype, tmp_path):
    if not support.have_llama_cpp():
        pytest.fail("llama-cpp-python is missing: run scripts/setup --test")
    src = support.llama_cpp_ggufs([(preset, "f32")])[(preset, "f32")]
    ckpt = support.hf_dir(preset, dtype="bfloat16")
    theirs_path = g4.quantize(src, tmp_path / "llama.gguf", qtype)
    import gguf
    theirs = {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(theirs_path)).tensors}
    packed = tmp_path / "lumen.lmp"
    lumen("convert", ckpt, packed, "--quant", qtype)
    ours = _lmp_matrix_types(packed)
    assert set(ours) <= set(theirs), sorted(set(ours) - set(theirs))
    # Tensors llama.cpp does not quantize keep their source type on both sides (F32 in its
    # conversion, BF16 in the checkpoint); everything else must be the same type.
    kept = {"F32", "BF16"}
    differ = {n: (t, theirs[n]) for n, t in ours.items() if t != theirs[n] and not (t in kept and theirs[n] in kept)}
    assert not differ, f"{preset} {qtype}: Lumen's type vs llama.cpp's: {differ}"
    assert sum(t not in kept for t in ours.values()) > 10
    if preset == "tiny-moe-k2":  # 8 experts: the expert rules apply (attn_k / attn_v at Q8_0)
        assert ours["blk.0.attn_k.weight"] == "Q8_0"
        tokens = token_sequence(512, 16, seed=4)
        assert np.array_equal(logits(tmp_path, src, "--quant", qtype, tokens=tokens), logits(tmp_path, packed, tokens=tokens))

