"""Gemma 4 GGUF files (llama.cpp's `gemma4` architecture) of a tiny checkpoint made by transformers
(tools/make_tiny_gemma4.py, preset tiny-k256: 5 layers S S F S F, hidden 256, 4 query heads, KV
heads 2 (sliding) / 1 (full, K = V), head dims 64 / 128, proportional RoPE on the full layers,
every matrix row a multiple of 256), written as llama.cpp's converter writes them
(tools/gemma4_gguf.py: F32, F16, BF16, Q8_0) and quantized by llama.cpp's own quantizer from the F32
file (Q4_0 ... IQ4_XS, when llama-cpp-python is installed).

  - exact path (`--exact`): logits at every position within 1e-4 (relative to the position's
    largest logit) of transformers run on the same numbers (the GGUF dequantized by gguf-py);
  - fast path (the default): per type, top-1 agreement and mean KL(exact || fast) over every
    position, bounded (figures in LUMEN_WORK_DIR/parity_report.json, section gemma4_gguf_fast);
  - greedy through the KV cache equals transformers'; the spec, tokenizer and chat format come
    from the file.
A type whose tensors Lumen does not read yet must be refused with one line naming the tensor and
its type (never a wrong answer).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import gemma4_gguf_support as support
from conftest import describe, record, ref, run_lumen, token_sequence, tokens_arg

REL_TOL = 1e-4
SEQ_LEN = 24  # 3x the window of 8: the sliding layers drop keys
# Fast path vs exact path, per type: mean KL(exact || fast) over the positions and top-1 agreement.
# The fast kernels quantize activations to int8 per block (the weights are the same numbers), so
# the bounds are about activation rounding, far above what an exact path shows (0) and far below
# what a wrong kernel gives (KL ~ 1, top-1 ~ chance).
FAST_MAX_MEAN_KL = 2e-3
FAST_MIN_TOP1 = 0.9

TYPES = support.CONVERTER_TYPES + ([t if t != "Q8_0" else "Q8_0-quantize" for t in support.QUANTIZER_TYPES]
                                   if support.have_llama_cpp() else [])


def _tokens():
    return token_sequence(512, SEQ_LEN, seed=7)


def _lumen_logits(path, tokens, tmp_path, *flags):
    out = tmp_path / f"logits{len(flags)}.npy"
    cp = run_lumen("logits", "-m", path, "--tokens", tokens_arg(tokens), "--out", out, *flags)
    return cp, (np.load(out) if cp.returncode == 0 else None)


def _refused_type(cp, path) -> str | None:
    """The tensor type named by a clean refusal of a block format Lumen does not read yet."""
    lines = cp.stderr.splitlines()
    if cp.returncode == 1 and len(lines) == 1 and "Lumen reads weight matrices of type" in lines[0]:
        assert lines[0].startswith(f"lumen: error: {path}: tensor '"), lines[0]
        return lines[0].split(" has type ")[1].split(";")[0]
    return None


@pytest.mark.parametrize("qtype", TYPES)
def test_exact_path_matches_transformers_on_the_same_numbers(qtype, tmp_path):
    path = support.gguf_file(qtype)
    tokens = _tokens()
    cp, got = _lumen_logits(path, tokens, tmp_path, "--exact")
    if got is None:
        refused = _refused_type(cp, path)
        assert refused is not None, describe(cp)
        record("gemma4_gguf_exact", qtype, {"refused_type": refused})
        pytest.skip(f"{qtype}: Lumen does not read {refused} tensors yet (refused by name)")
    want = ref.logits(support.dequantized_dir(qtype), tokens)
    assert want.std() > 0.5, "degenerate reference"
    rel = np.abs(got - want).max(axis=1) / np.abs(want).max(axis=1)
    record("gemma4_gguf_exact", qtype, {"max_rel": float(rel.max()), "positions": len(tokens)})
    assert (rel <= REL_TOL).all(), f"{qtype}: relative differences per position: {rel.tolist()}"


def _log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


@pytest.mark.parametrize("qtype", TYPES)
def test_fast_path_agrees_with_exact_path(qtype, tmp_path):
    path = support.gguf_file(qtype)
    tokens = _tokens()
    cp, exact = _lumen_logits(path, tokens, tmp_path, "--exact")
    if exact is None:
        assert _refused_type(cp, path) is not None, describe(cp)
        pytest.skip(f"{qtype}: not read yet (refused by name)")
    cp, fast = _lumen_logits(path, tokens, tmp_path)
    assert fast is not None, describe(cp)
    lp, lq = _log_softmax(exact), _log_softmax(fast)
    kl = (np.exp(lp) * (lp - lq)).sum(axis=1)
    top1 = float((exact.argmax(axis=1) == fast.argmax(axis=1)).mean())
    record("gemma4_gguf_fast", qtype, {"mean_kl": float(kl.mean()), "max_kl": float(kl.max()), "top1": top1})
    assert kl.mean() <= FAST_MAX_MEAN_KL and top1 >= FAST_MIN_TOP1, \
        f"{qtype}: mean KL {kl.mean():.3g} (max {kl.max():.3g}), top-1 agreement {top1:.3f}"


# llama.cpp (llama-cpp-python: f32 KV cache, no flash attention) vs Lumen on the same file. On the
# same numbers in f32 the two agree to llama.cpp's own approximations (its GELU is an f16 table;
# F16/BF16 products take f16 activations): LLAMA_SAME_NUMBERS_MAX_REL. On a block format llama.cpp
# rounds the activations to 8 bits (q8_0 / q8_K), and this tiny random model turns such rounding
# into logit differences of several percent; so Lumen's exact logits must be as close to
# llama.cpp's on the file as llama.cpp's own logits on the same numbers in f32 are
# (mean KL within LLAMA_KL_SLACK of it): what a misread format or layer would break by orders.
LLAMA_SAME_NUMBERS_MAX_REL = 1e-2
LLAMA_KL_SLACK = (1.5, 1e-4)  # KL(lumen || llama) <= 1.5 * KL(llama f32 || llama) + 1e-4


def _llama_cpp_logits(path, tokens) -> np.ndarray:
    llama_cpp = pytest.importorskip("llama_cpp")
    from llama_cpp import _logger

    _logger.set_verbose(False)
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, n_batch=64, n_ubatch=64, n_threads=2, n_threads_batch=2,
                          logits_all=True, flash_attn=False, type_k=llama_cpp.GGML_TYPE_F32,
                          type_v=llama_cpp.GGML_TYPE_F32, verbose=False)
    llm.eval(tokens)
    out = np.array(llm.scores[: len(tokens)], dtype=np.float32)
    llm.close()
    return out


def _mean_kl(p_logits, q_logits) -> float:
    lp, lq = _log_softmax(p_logits), _log_softmax(q_logits)
    return float((np.exp(lp) * (lp - lq)).sum(axis=1).mean())


@pytest.mark.parametrize("qtype", TYPES + ([f"lumen-{t}" for t in support.LUMEN_QUANTIZE_TYPES]
                                           if support.have_llama_cpp() else []))
def test_llama_cpp_logits_agree_with_lumen(qtype, tmp_path):
    """Files llama.cpp writes (and, as lumen-TYPE, files `lumen quantize` writes) read by both."""
    path = support.gguf_file(qtype)
    tokens = _tokens()
    cp, ours = _lumen_logits(path, tokens, tmp_path, "--exact")
    if ours is None:
        assert _refused_type(cp, path) is not None, describe(cp)
        pytest.skip(f"{qtype}: not read yet (refused by name)")
    theirs = _llama_cpp_logits(path, tokens)
    same_numbers = _llama_cpp_logits(support.dequantized_gguf(qtype), tokens)
    rel = np.abs(ours - same_numbers).max(axis=1) / np.abs(same_numbers).max(axis=1)
    kl, kl_own = _mean_kl(ours, theirs), _mean_kl(same_numbers, theirs)
    top1 = float((ours.argmax(axis=1) == theirs.argmax(axis=1)).mean())
    record("gemma4_gguf_llama_cpp", qtype, {
        "max_rel_same_numbers_f32": float(rel.max()), "mean_kl_vs_llama_cpp": kl,
        "llama_cpp_own_mean_kl_f32_vs_file": kl_own, "top1_vs_llama_cpp": top1,
        "max_rel_vs_llama_cpp": float((np.abs(ours - theirs).max(axis=1) / np.abs(theirs).max(axis=1)).max())})
    assert rel.max() <= LLAMA_SAME_NUMBERS_MAX_REL, \
        f"{qtype}: Lumen vs llama.cpp on the same numbers in f32: worst relative difference {rel.max():.3g}"
    factor, floor = LLAMA_KL_SLACK
    assert kl <= factor * kl_own + floor, \
        f"{qtype}: KL(Lumen || llama.cpp) {kl:.3g} vs llama.cpp's own f32-vs-file KL {kl_own:.3g}"


def test_bench_vs_llama_cpp_runs_both_sides():
    """tools/bench_vs_llamacpp.py on a tiny file: both engines measured, ratios printed (the
    figures themselves are a benchmark's, never asserted)."""
    import subprocess
    import sys

    from conftest import lumen_bin

    pytest.importorskip("llama_cpp")
    path = support.gguf_file("Q8_0")
    limits = {"read_bandwidth_gbs": 10.0, "int8_peak_gops": 100.0, "threads": 2, "isa": "given"}
    limits_file = support.root() / "limits-smoke.json"
    limits_file.write_text(json.dumps(limits))
    cp = subprocess.run([sys.executable, str(support.TOOLS / "bench_vs_llamacpp.py"), str(path), "--lumen", lumen_bin(),
                         "-p", "16", "-n", "4", "--limits", str(limits_file), "--flash-attn", "off", "--json"],
                        capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, cp.stderr[-3000:]
    r = json.loads(cp.stdout)
    assert r["lumen"]["prefill_tokens_per_s"] > 0 and r["llama_cpp"][0]["prefill_tokens_per_s"] > 0
    assert r["ratio_prefill"] > 0 and r["ratio_decode"] > 0


def test_writer_matches_llama_cpp_converter(tmp_path):
    """llama.cpp's own convert_hf_to_gguf.py (from the pinned llama-cpp-python sdist, which
    scripts/setup keeps in .cache/sdist) writes the same file as tools/gemma4_gguf.py: every
    metadata key and value (but general.name/type/size_label, which it derives from the folder)
    and every tensor's name, type, shape and bytes."""
    import gguf
    import subprocess
    import sys

    converter = support.llama_cpp_converter()
    theirs = tmp_path / "llama-cpp.gguf"
    cp = subprocess.run([sys.executable, str(converter), str(support.hf_dir()), "--outfile", str(theirs),
                         "--outtype", "f32"], capture_output=True, text=True, timeout=600)
    assert cp.returncode == 0, cp.stderr[-3000:]
    a, b = gguf.GGUFReader(str(theirs)), gguf.GGUFReader(str(support.gguf_file("F32")))
    derived = {"general.name", "general.type", "general.size_label"}

    def fields(r):
        return {k: (f.types, f.contents()) for k, f in r.fields.items()
                if not k.startswith("GGUF.") and k not in derived}

    fa, fb = fields(a), fields(b)
    assert sorted(fa) == sorted(fb)
    for k in fa:
        assert fa[k] == fb[k], k
    assert [t.name for t in a.tensors] == [t.name for t in b.tensors]
    for ta, tb in zip(a.tensors, b.tensors):
        assert (ta.tensor_type, ta.shape.tolist()) == (tb.tensor_type, tb.shape.tolist()), ta.name
        assert np.array_equal(np.asarray(ta.data), np.asarray(tb.data)), ta.name


def test_greedy_through_the_cache_matches_transformers():
    path = support.gguf_file("F32")
    model = ref.load(support.dequantized_dir("F32"))
    tokens = _tokens()
    want = ref.greedy(model, tokens, 8)
    cp = run_lumen("run", "-m", path, "--tokens", tokens_arg(tokens), "-n", 8, "--exact")
    assert cp.returncode == 0, describe(cp)
    assert json.loads(cp.stdout.strip().splitlines()[-1]) == want


def test_spec_comes_from_the_gemma4_keys_and_tensors():
    path = support.gguf_file("F32")
    cp = run_lumen("inspect", path, "--json")
    assert cp.returncode == 0, describe(cp)
    spec = json.loads(cp.stdout)
    assert (spec["family"], spec["source_kind"], spec["hidden_size"], spec["vocab_size"]) == ("gemma4", "gguf", 256, 512)
    assert spec["attention_scale"] == 1.0 and spec["final_logit_softcap"] == 30.0 and not spec["norm_weight_offset"]
    layers = spec["layers"]
    assert [l["kind"] for l in layers] == ["sliding", "sliding", "full", "sliding", "full"]
    for l in layers:
        full = l["kind"] == "full"
        assert (l["num_q_heads"], l["num_kv_heads"], l["head_dim"]) == (4, 1 if full else 2, 128 if full else 64)
        assert l["k_eq_v"] == full and l["v_norm"] and l["has_layer_scalar"]
        assert l["window"] == (0 if full else 8)
        # proportional RoPE: 0.25 of the full head rotated, frequencies over the whole head dim
        assert (l["rope"]["theta"], l["rope"]["rotated_pairs"], l["rope"]["freq_base_dim"]) == \
            ((1e6, 16, 128) if full else (1e4, 32, 64))
    assert spec["chat_template"] == "gemma4" and spec["tokens"]["stop"] == [1, 106]


def test_tokenizer_comes_from_the_file():
    from transformers import AutoTokenizer

    path = support.gguf_file("F32")
    hf = AutoTokenizer.from_pretrained(support.hf_dir())
    for text in ["Hello world, what is the answer?", "The sea, the sky\n\nand  the stars.", "<|turn>user\nHi<turn|>",
                 "caf\u00e9 \u2603 \U0001F600"]:
        cp = run_lumen("tokenize", "-m", path, text)
        assert cp.returncode == 0, describe(cp)
        assert json.loads(cp.stdout) == hf(text, add_special_tokens=False).input_ids, text


@pytest.mark.parametrize("thinking", [False, True])
def test_chat_template_of_the_file_is_the_gemma4_format(thinking, tmp_path):
    """The file's tokenizer.chat_template (rendered by transformers' Jinja) and Lumen's built-in
    Gemma 4 chat format give the same prompt ids."""
    from transformers import AutoTokenizer

    path = support.gguf_file("F32")
    hf = AutoTokenizer.from_pretrained(support.hf_dir())
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"},
                {"role": "assistant", "content": "Hi."}, {"role": "user", "content": "What is the sea?"}]
    want = hf.apply_chat_template(messages, tokenize=True, add_generation_prompt=True, enable_thinking=thinking)
    want = want["input_ids"] if isinstance(want, dict) or hasattr(want, "keys") else want
    chat = tmp_path / "chat.json"
    chat.write_text(json.dumps(messages))
    args = ["tokenize", "-m", path, "--chat", chat] + (["--thinking"] if thinking else [])
    cp = run_lumen(*args)
    assert cp.returncode == 0, describe(cp)
    assert json.loads(cp.stdout) == list(want)
    cp = run_lumen("run", "-m", path, "-p", "Hello", "--temp", "0", "-n", "4", "--exact")
    assert cp.returncode == 0 and cp.stderr == "", describe(cp)
