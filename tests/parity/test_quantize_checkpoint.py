"""`lumen quantize` straight from a Hugging Face checkpoint or a packed .lmp: the GGUF it writes
equals what llama.cpp's own pipeline makes of the same checkpoint (convert_hf_to_gguf.py of the
pinned llama-cpp-python sdist, then quantized from that file), key for key and byte for byte.

For the tiny Gemma 4 checkpoints made by transformers (tools/make_tiny_gemma4.py, with the tiny
Gemma 4 tokenizer):
  tiny-k256   dense, f32 checkpoint
  tiny-e2b    per-layer inputs, KV-shared blocks, the double-wide MLP (E2B's layout), bf16
  * the metadata Lumen derives from config.json and the tokenizer files equals the converter's
    (every key but general.name and the naming keys the converter guesses from the folder name);
  * `lumen quantize CHECKPOINT --type T` and `lumen quantize CONVERTED.gguf --type T` give the same
    tensors (names, types, shapes, bytes) and the same metadata, for Q4_K_M and Q8_0;
  * a packed .lmp of the checkpoint's numbers (lumen convert --quant bf16, tokenizer beside it) gives
    the same file, and so does a .lmp converted with the Q4_K_M mix (its blocks are copied); any
    other type from a quantized .lmp needs --allow-requantize, as llama-quantize asks;
  * bad sources (no tokenizer.json, a missing tensor, experts) are one-line errors and leave no file.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import gemma4_gguf_support as support
from conftest import describe, run_lumen

gguf = pytest.importorskip("gguf")

CASES = [("tiny-k256", "float32", "f32"), ("tiny-e2b", "bfloat16", "bf16")]
TYPES = ["Q4_K_M", "Q8_0"]
# Keys the converter derives from the folder's name and a model card (general.name, size label...):
# not a property of the model.
NAMING = {"general.name", "general.basename", "general.size_label", "general.finetune", "general.type",
          "general.quantized_by", "general.version"}


def _read(path):
    r = gguf.GGUFReader(str(path))
    kv = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k in NAMING:
            continue
        v = f.contents()
        kv[k] = [float(x) if isinstance(x, float) else x for x in v] if isinstance(v, list) else v
    tensors = {t.name: (int(t.tensor_type), [int(x) for x in t.shape], np.asarray(t.data).tobytes()) for t in r.tensors}
    return kv, tensors


def _diff_kv(a: dict, b: dict) -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        if k not in a or k not in b:
            out.append(f"{k}: only in {'ours' if k in a else 'theirs'}")
        elif a[k] != b[k]:
            va, vb = a[k], b[k]
            if isinstance(va, list) and isinstance(vb, list) and len(va) == len(vb):
                i = next(i for i in range(len(va)) if va[i] != vb[i])
                out.append(f"{k}[{i}]: {va[i]!r} != {vb[i]!r}")
            else:
                out.append(f"{k}: {str(va)[:80]!r} != {str(vb)[:80]!r}")
    return out


def _diff_tensors(a: dict, b: dict) -> list[str]:
    out = []
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            out.append(f"{name}: only in {'ours' if name in a else 'theirs'}")
        elif a[name][:2] != b[name][:2]:
            out.append(f"{name}: type/shape {a[name][:2]} != {b[name][:2]}")
        elif a[name][2] != b[name][2]:
            out.append(f"{name}: bytes differ")
    return out


@pytest.fixture(scope="module")
def converted():
    """preset -> (checkpoint folder, llama.cpp's conversion of it at the checkpoint's own precision)."""
    out = {}
    for preset, dtype, outtype in CASES:
        files = support.llama_cpp_ggufs([(preset, outtype)], dtype=dtype)
        out[preset] = (support.hf_dir(preset, dtype=dtype), files[(preset, outtype)])
    return out


def _quantize(src, dst, qtype, *extra):
    cp = run_lumen("quantize", src, dst, "--type", qtype, *extra)
    assert cp.returncode == 0, describe(cp)
    return dst


@pytest.mark.parametrize("preset", [c[0] for c in CASES])
def test_metadata_equals_the_converters(preset, converted, tmp_path):
    hf, theirs = converted[preset]
    ours = _quantize(hf, tmp_path / "ours.gguf", "Q8_0")
    kv_ours, _ = _read(ours)
    kv_theirs, _ = _read(theirs)
    # The file type and quantization version are llama-quantize's to set: compared in the next test.
    for k in ("general.file_type", "general.quantization_version"):
        kv_ours.pop(k, None)
        kv_theirs.pop(k, None)
    problems = _diff_kv(kv_ours, kv_theirs)
    assert not problems, f"{preset}: metadata differs from convert_hf_to_gguf.py's:\n" + "\n".join(problems)


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("preset", [c[0] for c in CASES])
def test_checkpoint_quantizes_as_its_gguf(preset, qtype, converted, tmp_path):
    hf, conv = converted[preset]
    ours = _read(_quantize(hf, tmp_path / "from-checkpoint.gguf", qtype))
    via = _read(_quantize(conv, tmp_path / "from-gguf.gguf", qtype))
    problems = _diff_kv(ours[0], via[0]) + _diff_tensors(ours[1], via[1])
    assert not problems, f"{preset} {qtype}: checkpoint vs converted file:\n" + "\n".join(problems[:20])
    types = {t[0] for t in ours[1].values()}
    assert len(types) > 1, "a mix of types was expected"


def test_packed_file_quantizes_as_its_checkpoint(converted, tmp_path):
    hf, _ = converted["tiny-e2b"]
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(hf / name, tmp_path / name)
    lmp = tmp_path / "model.lmp"
    cp = run_lumen("convert", hf, lmp, "--quant", "bf16")
    assert cp.returncode == 0, describe(cp)
    a = _read(_quantize(lmp, tmp_path / "from-lmp.gguf", "Q4_K_M"))
    b = _read(_quantize(hf, tmp_path / "from-checkpoint.gguf", "Q4_K_M"))
    problems = _diff_kv(a[0], b[0]) + _diff_tensors(a[1], b[1])
    assert not problems, "lmp vs checkpoint:\n" + "\n".join(problems[:20])

    # A .lmp converted with the Q4_K_M mix holds the same blocks: written as they are.
    q4 = tmp_path / "model-q4.lmp"
    cp = run_lumen("convert", hf, q4, "--quant", "q4")
    assert cp.returncode == 0, describe(cp)
    c = _read(_quantize(q4, tmp_path / "from-q4-lmp.gguf", "Q4_K_M"))
    problems = _diff_kv(c[0], b[0]) + _diff_tensors(c[1], b[1])
    assert not problems, "Q4_K_M lmp vs checkpoint:\n" + "\n".join(problems[:20])
    # Another type from it is requantizing, which loses quality: it takes --allow-requantize.
    out = tmp_path / "requant.gguf"
    cp = run_lumen("quantize", q4, out, "--type", "Q8_0")
    assert cp.returncode != 0 and "--allow-requantize" in cp.stderr, describe(cp)
    assert not list(tmp_path.glob("requant.gguf*"))
    _quantize(q4, out, "Q8_0", "--allow-requantize")
    cp = run_lumen("logits", "--tokens", "2,10,20", "--out", tmp_path / "l.npy", "-m", out)
    assert cp.returncode == 0, describe(cp)
    assert np.isfinite(np.load(tmp_path / "l.npy")).all()


def _copy_checkpoint(src, dst, drop=None):
    dst.mkdir()
    for f in src.iterdir():
        if f.name != drop:
            shutil.copyfile(f, dst / f.name)
    return dst


def test_bad_sources(converted, tmp_path):
    hf, _ = converted["tiny-k256"]
    # No tokenizer: the GGUF would carry no vocabulary.
    bare = _copy_checkpoint(hf, tmp_path / "bare", drop="tokenizer.json")
    out = tmp_path / "out.gguf"
    cp = run_lumen("quantize", bare, out, "--type", "Q8_0")
    assert cp.returncode != 0 and "tokenizer.json" in cp.stderr, describe(cp)
    assert len(cp.stderr.strip().splitlines()) == 1, describe(cp)
    assert not out.exists() and not list(tmp_path.glob("out.gguf*"))

    # A tensor missing from the checkpoint: named.
    from safetensors.numpy import load_file, save_file

    broken = _copy_checkpoint(hf, tmp_path / "broken")
    st = next(broken.glob("*.safetensors"))
    tensors = load_file(str(st))
    victim = next(n for n in sorted(tensors) if n.endswith("layers.1.mlp.up_proj.weight"))
    del tensors[victim]
    save_file(tensors, str(st))
    cp = run_lumen("quantize", broken, out, "--type", "Q8_0")
    assert cp.returncode != 0 and "up_proj" in cp.stderr, describe(cp)
    assert not list(tmp_path.glob("out.gguf*"))

    # Experts: llama.cpp's mix treats them apart; refused by name.
    moe = support.hf_dir("tiny-moe-k2", dtype="bfloat16")
    cp = run_lumen("quantize", moe, out, "--type", "Q8_0")
    assert cp.returncode != 0 and "expert" in cp.stderr, describe(cp)
    assert not list(tmp_path.glob("out.gguf*"))


def test_llama_cpp_runs_the_file_written_from_the_checkpoint(converted, tmp_path):
    """llama.cpp (llama-cpp-python) loads the Q4_K_M file Lumen wrote straight from the dense
    checkpoint, and agrees with Lumen on it as test_gemma4_gguf asks of every file: on the same
    numbers in f32 within llama.cpp's approximations, and on the file itself as close as llama.cpp's
    8-bit activations allow."""
    pytest.importorskip("llama_cpp")
    import json

    from conftest import token_sequence
    from test_gemma4_gguf import LLAMA_KL_SLACK, LLAMA_SAME_NUMBERS_MAX_REL, _llama_cpp_logits, _mean_kl

    hf, _ = converted["tiny-k256"]
    path = _quantize(hf, tmp_path / "q4_k_m.gguf", "Q4_K_M")
    config = json.loads((hf / "config.json").read_text())
    tokens = token_sequence(config.get("text_config", config)["vocab_size"], 32, seed=5)
    out = tmp_path / "ours.npy"
    cp = run_lumen("logits", "--tokens", ",".join(map(str, tokens)), "--out", out, "-m", path, "--exact")
    assert cp.returncode == 0, describe(cp)
    ours = np.load(out)
    theirs = _llama_cpp_logits(path, tokens)
    same_numbers = _llama_cpp_logits(support.dequantized_copy(path), tokens)
    rel = np.abs(ours - same_numbers).max(axis=1) / np.abs(same_numbers).max(axis=1)
    assert rel.max() <= LLAMA_SAME_NUMBERS_MAX_REL, f"same numbers in f32: worst relative difference {rel.max():.3g}"
    kl, kl_own = _mean_kl(ours, theirs), _mean_kl(same_numbers, theirs)
    factor, floor = LLAMA_KL_SLACK
    assert kl <= factor * kl_own + floor, f"KL(Lumen || llama.cpp) {kl:.3g} vs llama.cpp's own f32-vs-file KL {kl_own:.3g}"
