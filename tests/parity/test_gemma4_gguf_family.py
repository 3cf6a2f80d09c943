"""Gemma 4 GGUFs of the rest of the family, as llama.cpp's own convert_hf_to_gguf.py writes them (the
pinned llama-cpp-python sdist's copy): per-layer inputs and KV-shared blocks (E2B/E4B), the
double-wide MLP of the shared blocks (E2B) and experts (26B-A4B).

The checkpoints are test_family's tiny ones, made by transformers itself (bf16; tools/make_tiny_gemma4.py):
  tiny-ple          per-layer inputs only
  tiny-kvshare      KV sharing only
  tiny-ple-kvshare  both (E4B's layout)
  tiny-e2b          both and the double-wide MLP (E2B's layout)
  tiny-moe-k1/k2/k5 experts, top-1 / 2 / 5
  tiny-all          everything at once, k == v on the full layers
each with the tiny Gemma 4 tokenizer, converted with --outtype f32 (the checkpoint's bf16 numbers
exactly). For each:
  * logits of every position of a 64-token sequence within 1e-4 of transformers on the checkpoint
    (max|lumen - ref| / max|ref|), and bit-equal to Lumen's reading of the checkpoint itself on the
    exact path;
  * the spec from the file's keys and tensors equals the one from config.json;
  * 32 greedy tokens through the KV cache identical to transformers' generate().
Also: the BF16 file (matrices as the checkpoint stores them) reads bit-equal too; the converter's
Q8_0 file (expert stacks Q8_0 and F16, per-layer table Q8_0) on the exact path equals its own numbers
as F32, and the fast path stays near it; experts stored as separate ffn_gate_exps / ffn_up_exps
(llama.cpp reads both) give the same logits as the fused stack; llama.cpp (llama-cpp-python) on the
same files agrees with Lumen, or aborts where its rule for the KV-shared blocks' source (block
n_kv - 2 for sliding, n_kv - 1 for full) is not transformers'; `lumen quantize` gives llama-quantize's
mix on per-layer-input / KV-shared files and refuses files with experts by name.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import gemma4_gguf_support as support
from conftest import describe, greedy_case, mk, model_dir, record, ref, run_lumen, token_sequence, tokens_arg

import gemma4_gguf as g4

REL_TOL = 1e-4
SEQ_LEN = 64
GREEDY_N = 32
VARIANTS = ["tiny-ple", "tiny-kvshare", "tiny-ple-kvshare", "tiny-e2b", "tiny-moe-k1", "tiny-moe-k2", "tiny-moe-k5",
            "tiny-all"]
EXTRA = [("tiny-all", "bf16"), ("tiny-all", "q8_0"), ("tiny-moe-k2", "q8_0")]
# The fast path vs the exact path on a block format (as test_gemma4_gguf): activation rounding only.
FAST_MAX_MEAN_KL = 2e-3
FAST_MIN_TOP1 = 0.9
# llama.cpp vs Lumen on the same F32 file: llama.cpp's own approximations (an f16 GELU table).
LLAMA_MAX_REL = 1e-2
LLAMA_KL_SLACK = (1.5, 1e-4)  # on a block format: KL(lumen || llama) <= 1.5 KL(llama f32 || llama) + 1e-4
# Spec fields that name the source or come from the tokenizer rather than the model.
NOT_COMPARED = {"notes", "source", "source_kind", "model_type", "tokens", "chat_template"}


@pytest.fixture(scope="module")
def files():
    """(preset, outtype) -> llama.cpp's conversion of the checkpoint (one converter run for all)."""
    return support.llama_cpp_ggufs([(v, "f32") for v in VARIANTS] + EXTRA)


def _logits(tmp_path, tag, tokens, *args) -> np.ndarray:
    out = tmp_path / f"{tag}.npy"
    cp = run_lumen("logits", "--tokens", tokens_arg(tokens), "--out", out, *args)
    assert cp.returncode == 0, describe(cp)
    return np.load(out)


def _spec(path) -> dict:
    cp = run_lumen("inspect", path, "--json")
    assert cp.returncode == 0, describe(cp)
    return {k: v for k, v in json.loads(cp.stdout).items() if k not in NOT_COMPARED}


def _rel(got, want) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def _log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def _mean_kl(p, q) -> float:
    lp, lq = _log_softmax(p), _log_softmax(q)
    return float((np.exp(lp) * (lp - lq)).sum(axis=1).mean())


@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_matches_transformers_and_the_checkpoint(variant, files, tmp_path):
    path = files[(variant, "f32")]
    mdir = model_dir(variant)
    vocab = mk.PRESETS[variant]["vocab_size"]
    assert _spec(path) == _spec(mdir), f"{variant}: the GGUF's spec differs from config.json's"
    tokens = token_sequence(vocab, SEQ_LEN, seed=11)
    want = ref.logits(mdir, tokens)
    got = _logits(tmp_path, "gguf", tokens, "-m", path)
    # The F32 file holds the checkpoint's bf16 numbers: on the exact path the two are one model. (On
    # the default path the checkpoint's bf16 matrices take the vdpbf16ps kernel where the CPU has
    # AVX-512 BF16, which rounds the activations to 16 significant bits.)
    from_checkpoint = _logits(tmp_path, "ckpt", tokens, "-m", mdir, "--exact")
    prompt, want_ids, margin, _ = greedy_case(mdir, vocab, SEQ_LEN, GREEDY_N, seed=21)
    run = run_lumen("run", "-m", path, "--tokens", tokens_arg(prompt), "-n", GREEDY_N)
    assert run.returncode == 0, describe(run)
    got_ids = json.loads(run.stdout.strip().splitlines()[-1])
    rel = _rel(got, want)
    record("gemma4_gguf_family", variant, dict(rel=rel, tol=REL_TOL, checkpoint_equal=bool(np.array_equal(got, from_checkpoint)),
                                               greedy_equal=got_ids == want_ids, greedy_margin=margin))
    assert rel <= REL_TOL, f"{variant}: max|lumen-ref|/max|ref| = {rel:.3e}"
    assert np.array_equal(got, from_checkpoint), f"{variant}: GGUF vs checkpoint {_rel(got, from_checkpoint):.3e}"
    assert got_ids == want_ids, f"{variant}: greedy\n lumen {got_ids}\n ref   {want_ids}"


def test_bf16_file_reads_as_the_checkpoint(files, tmp_path):
    """The converter's BF16 file stores the matrices as the checkpoint does (norms, router and
    scales in F32, the same numbers): the same logits bit for bit, on both paths."""
    tokens = token_sequence(512, SEQ_LEN, seed=5)
    for flags in ([], ["--exact"]):
        got = _logits(tmp_path, "bf16", tokens, "-m", files[("tiny-all", "bf16")], *flags)
        want = _logits(tmp_path, "ckpt", tokens, "-m", model_dir("tiny-all"), *flags)
        assert np.array_equal(got, want), f"{flags}: {_rel(got, want):.3e}"


@pytest.mark.parametrize("variant", ["tiny-all", "tiny-moe-k2"])
def test_q8_0_file(variant, files, tmp_path):
    """Block formats in the new tensors (expert stacks Q8_0 / F16, per-layer table and projections
    Q8_0): the exact path reads exactly the file's numbers; the fast kernels stay near it."""
    path = files[(variant, "q8_0")]
    tokens = token_sequence(512, SEQ_LEN, seed=7)
    exact = _logits(tmp_path, "exact", tokens, "-m", path, "--exact")
    same_numbers = _logits(tmp_path, "f32", tokens, "-m", support.dequantized_copy(path), "--exact")
    fast = _logits(tmp_path, "fast", tokens, "-m", path)
    kl = _mean_kl(exact, fast)
    top1 = float((exact.argmax(1) == fast.argmax(1)).mean())
    record("gemma4_gguf_family", f"{variant}-q8_0", dict(exact_equal_f32=bool(np.array_equal(exact, same_numbers)),
                                                        fast_mean_kl=kl, fast_top1=top1))
    assert np.array_equal(exact, same_numbers), f"{variant}: {_rel(exact, same_numbers):.3e}"
    assert kl <= FAST_MAX_MEAN_KL and top1 >= FAST_MIN_TOP1, f"{variant}: mean KL {kl:.3g}, top-1 {top1:.3f}"


def _split_gate_up(src, dst):
    """src with every ffn_gate_up_exps [E, 2W, H] stored as ffn_gate_exps and ffn_up_exps [E, W, H]."""
    p = g4.read_prepared(src)
    tensors = {}
    for name, (data, qtype) in p.tensors.items():
        if name.endswith(".ffn_gate_up_exps.weight"):
            w = data.shape[1] // 2
            tensors[name.replace("gate_up", "gate")] = (np.ascontiguousarray(data[:, :w]), qtype)
            tensors[name.replace("gate_up", "up")] = (np.ascontiguousarray(data[:, w:]), qtype)
        else:
            tensors[name] = (data, qtype)
    p.tensors = tensors
    return g4.write(p, dst)


def test_separate_gate_and_up_expert_stacks(files, tmp_path):
    fused = files[("tiny-moe-k2", "f32")]
    split = _split_gate_up(fused, tmp_path / "split.gguf")
    tokens = token_sequence(512, 24, seed=9)
    a = _logits(tmp_path, "fused", tokens, "-m", fused)
    b = _logits(tmp_path, "split", tokens, "-m", split)
    assert np.array_equal(a, b)
    if support.have_llama_cpp():
        assert np.array_equal(_llama_cpp_logits(fused, tokens), _llama_cpp_logits(split, tokens))


# ----------------------------------------------------------------------------- llama.cpp on the same files

def _llama_cpp_kv_rule_holds(variant) -> bool:
    """llama.cpp (llama-model.cpp, the gemma4 KV reuse callback) gives a KV-shared block the cache of
    block n_kv - 2 when it slides and n_kv - 1 when it is full (n_kv: the blocks that store KV):
    transformers' rule (the last earlier block of the same kind) on the real models' layouts only."""
    pd = mk.PRESETS[variant]
    kinds = pd["layer_types"]
    n_kv = len(kinds) - pd.get("num_kv_shared_layers", 0)
    for i in range(n_kv, len(kinds)):
        theirs = n_kv - (2 if kinds[i] == "sliding_attention" else 1)
        ours = max(j for j in range(n_kv) if kinds[j] == kinds[i])
        if theirs != ours:
            return False
    return True


_LLAMA_SCRIPT = """
import sys, numpy as np, llama_cpp
from llama_cpp import _logger
_logger.set_verbose(False)
path, out, tokens = sys.argv[1], sys.argv[2], [int(t) for t in sys.argv[3].split(",")]
llm = llama_cpp.Llama(model_path=path, n_ctx=128, n_batch=128, n_ubatch=128, n_threads=2, n_threads_batch=2,
                      logits_all=True, flash_attn=False, type_k=llama_cpp.GGML_TYPE_F32,
                      type_v=llama_cpp.GGML_TYPE_F32, verbose=False)
llm.eval(tokens)
np.save(out, np.array(llm.scores[: len(tokens)], dtype=np.float32))
llm.close()
"""


def _llama_cpp_run(path, tokens, out):
    """llama.cpp in a process of its own (it aborts on a file it cannot run)."""
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    return subprocess.run([sys.executable, "-c", _LLAMA_SCRIPT, str(path), str(out), tokens_arg(tokens)],
                          capture_output=True, text=True, timeout=300, env=env)


def _llama_cpp_logits(path, tokens) -> np.ndarray:
    pytest.importorskip("llama_cpp")
    out = path.with_name(f".{path.stem}.llama-{os.getpid()}.npy")
    cp = _llama_cpp_run(path, tokens, out)
    assert cp.returncode == 0, f"llama.cpp on {path}:\n{cp.stderr[-3000:]}"
    try:
        return np.load(out)
    finally:
        out.unlink()


@pytest.mark.parametrize("variant", VARIANTS)
def test_llama_cpp_on_the_same_file(variant, files, tmp_path):
    pytest.importorskip("llama_cpp")
    path = files[(variant, "f32")]
    tokens = token_sequence(mk.PRESETS[variant]["vocab_size"], SEQ_LEN, seed=11)
    if not _llama_cpp_kv_rule_holds(variant):
        cp = _llama_cpp_run(path, tokens, tmp_path / "x.npy")
        why = next((l for l in cp.stderr.splitlines() if "GGML_ASSERT" in l), cp.stderr.strip()[-300:])
        record("gemma4_gguf_family_llama_cpp", variant, {"llama_cpp": "aborts", "why": why})
        assert cp.returncode != 0, f"{variant}: llama.cpp ran a layout outside its KV reuse rule; compare it now"
        assert "map_layer_ids" in why, why
        return
    ours = _logits(tmp_path, "ours", tokens, "-m", path)
    theirs = _llama_cpp_logits(path, tokens)
    rel = np.abs(ours - theirs).max(axis=1) / np.abs(theirs).max(axis=1)
    top1 = float((ours.argmax(1) == theirs.argmax(1)).mean())
    record("gemma4_gguf_family_llama_cpp", variant, {"max_rel": float(rel.max()), "top1": top1})
    assert rel.max() <= LLAMA_MAX_REL, f"{variant}: Lumen vs llama.cpp, worst relative difference {rel.max():.3g}"


def test_llama_cpp_on_a_q8_0_expert_file(files, tmp_path):
    """Block-format expert stacks: Lumen's exact logits are as close to llama.cpp's on the Q8_0 file
    as llama.cpp's own logits on the same numbers in F32 are (llama.cpp rounds activations to 8 bits)."""
    pytest.importorskip("llama_cpp")
    path = files[("tiny-moe-k2", "q8_0")]
    tokens = token_sequence(512, SEQ_LEN, seed=11)
    ours = _logits(tmp_path, "ours", tokens, "-m", path, "--exact")
    theirs = _llama_cpp_logits(path, tokens)
    own = _llama_cpp_logits(support.dequantized_copy(path), tokens)
    kl, kl_own = _mean_kl(ours, theirs), _mean_kl(own, theirs)
    record("gemma4_gguf_family_llama_cpp", "tiny-moe-k2-q8_0", {"mean_kl": kl, "llama_cpp_own_mean_kl": kl_own})
    factor, floor = LLAMA_KL_SLACK
    assert kl <= factor * kl_own + floor, f"KL(Lumen || llama.cpp) {kl:.3g} vs llama.cpp's own {kl_own:.3g}"


# ----------------------------------------------------------------------------- lumen quantize

def _types(path) -> dict:
    import gguf

    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors}


def test_lumen_quantize_on_family_files(files, tmp_path):
    """Per-layer inputs and KV-shared blocks: llama-quantize's Q4_K_M mix, tensor for tensor, and the
    result runs; a file with experts is refused by name (llama.cpp's mix treats experts apart)."""
    src = files[("tiny-ple-kvshare", "f32")]
    ours = tmp_path / "lumen-q4_k_m.gguf"
    cp = run_lumen("quantize", src, ours, "--type", "Q4_K_M")
    assert cp.returncode == 0, describe(cp)
    run = run_lumen("run", "-m", ours, "--tokens", "2,17,300,45", "-n", "4")
    assert run.returncode == 0, describe(run)
    if support.have_llama_cpp():
        theirs = g4.quantize(src, tmp_path / "llama-q4_k_m.gguf", "Q4_K_M")
        assert _types(ours) == _types(theirs)
    moe = files[("tiny-moe-k1", "f32")]
    cp = run_lumen("quantize", moe, tmp_path / "moe.gguf", "--type", "Q8_0")
    lines = cp.stderr.splitlines()
    assert cp.returncode == 1 and len(lines) == 1, describe(cp)
    assert lines[0].startswith(f"lumen: error: {moe}: block 0 is a mixture-of-experts block"), lines[0]
    assert not (tmp_path / "moe.gguf").exists()
