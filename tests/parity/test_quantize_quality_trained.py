"""Lumen's quantizer against llama.cpp's on a TRAINED tiny Gemma 4, through a `gemma4` GGUF.

The same comparison as test_quantize_quality.py (the real Gemma 3 270M), on the byte-level tiny
Gemma 4 that test_quant_trained.py trains and caches (tools/train_tiny_gemma4.py: hidden 128,
intermediate 256, heads of 32 (sliding) / 64 (full), 260 ids, ~1M parameters, trained on the
Pentateuch). Its f32 checkpoint is written once as an F32 `gemma4` GGUF by tools/gemma4_gguf.py
(llama.cpp's converter, key for key). For Q8_0, Q6_K, Q5_K_M, Q4_K_M, Q4_0, IQ4_XS, without and
with an importance matrix (`lumen imatrix` on KJV Mark 1-4), the F32 file is quantized by
`lumen quantize` and by llama.cpp's `llama_model_quantize`; both files are scored by Lumen's
exact path against the f32 model's log-probabilities on the held-out Matthew 1-5
(`lumen perplexity --kl-divergence-base / --kl-divergence`). Neither text is in the training set.

The vocabulary. The model's ids are bytes + 4 (0 pad, 1 eos, 2 bos, 3 unused), far fewer than the
tiny Gemma 4 tokenizer of gemma4_gguf.py needs, so this test writes a tokenizer.json that is
exactly that byte code: a BPE without merges, with byte fallback, whose 256 byte tokens are named
so that the converter and Lumen's gemma4 GGUF tokenizer map text to the trainer's ids (the
printable ASCII bytes by their character, the space by SentencePiece's U+2581 that the
normalizer turns spaces into, every other byte <0xXX>). The test asserts that `lumen tokenize`
through the GGUF gives trainer.encode's ids on the evaluation text, and that the F32 GGUF's
logits equal the checkpoint's, so `lumen perplexity -f TEXT` scores the model on what it learned.

The width. K-quant and IQ4_XS blocks are 256 wide: only matrices whose rows (input dimension)
are multiples of 256 can take them, here the MLP's down projection and the full layers' output
projection (8 of the 41 matrices); every other matrix (rows of 128) falls back as llama.cpp
decides (measured: Q6_K -> Q8_0, Q5_K -> Q5_1, Q4_K -> Q5_0, IQ4_XS -> IQ4_NL). The table shows,
per type, how many tensors carry each block type; the equality of both files' tensor types checks that Lumen
falls back exactly as llama.cpp does, and the KL then compares mostly the fallback formats.
Q8_0 and Q4_0 have 32-wide blocks and quantize every matrix.

Asserted, per type and imatrix setting: Lumen's mean KL <= 1.1 x llama.cpp's + 2e-6, and equal
tensor types. Figures go to parity_report.json (section quantize_quality_trained) and are
printed. As in test_quantize_quality.py, the imatrix variants run for the 4-bit types by default
(LUMEN_QUANTIZE_IMATRIX_TYPES=all: every type).

Evaluation length: the whole held-out text, 64 chunks of 256 bytes (8128 scored positions). A
tiny model's KL over few positions is noisy: over 8 chunks (1016 positions) Lumen's IQ4_XS
measured 1.14 x llama.cpp's mean KL (1.12 with the imatrix) although its weights are closer to
the f32 ones in every one of the 41 matrices (RMS error 3-4% lower); over 64 chunks the ratio is
1.02 (1.08 with the imatrix). Calibration: 8 chunks of Mark 1-4.
"""
from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import describe, record, run_lumen, tokens_arg, work_dir
from test_quant_trained import trained  # noqa: F401  (the cached trained checkpoint, a fixture)
from test_quantize_quality import compare_with_llama_cpp, llama_cpp_module, lumen, print_comparison, tensor_types

import gemma4_gguf as g4  # noqa: E402  (conftest put tools/ on sys.path)
import train_tiny_gemma4 as trainer  # noqa: E402

CTX = 256
EVAL_CHUNKS = 64    # all of Matthew 1-5: 64 x 127 scored positions (the second half of each chunk)
CALIB_CHUNKS = 8
CALIB_RANGE = "mark1:1-mark4:41"
# The 256-wide block types and the file types whose main type they are.
BLOCK = {"Q8_0": "Q8_0", "Q6_K": "Q6_K", "Q5_K_M": "Q5_K", "Q4_K_M": "Q4_K", "Q4_0": "Q4_0", "IQ4_XS": "IQ4_XS"}


def _byte_name(b: int) -> str:
    if b == 0x20:
        return "\u2581"
    if 0x21 <= b <= 0x7E:
        return chr(b)
    return f"<0x{b:02X}>"


def write_byte_tokenizer(hf_dir: Path) -> None:
    """tokenizer.json / tokenizer_config.json of the trainer's byte code (id = byte + 4)."""
    off = trainer.BYTE_OFFSET
    vocab = {"<pad>": 0, "<eos>": 1, "<bos>": trainer.BOS, "<unk>": 3}
    vocab.update({_byte_name(b): off + b for b in range(256)})
    assert len(vocab) == trainer.VOCAB and sorted(vocab.values()) == list(range(trainer.VOCAB))
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for t, i in vocab.items() if i < off]
    bos = [{"SpecialToken": {"id": "<bos>", "type_id": 0}}]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing", "single": bos + [{"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": bos + [{"Sequence": {"id": "A", "type_id": 0}},
                                          {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<bos>": {"id": "<bos>", "ids": [trainer.BOS], "tokens": ["<bos>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": []},
    }
    (hf_dir / "tokenizer.json").write_text(json.dumps(tokenizer))
    # PreTrainedTokenizerFast: GemmaTokenizer would add a <mask> the model has no row for.
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
         "add_bos_token": True, "add_eos_token": False, "tokenizer_class": "PreTrainedTokenizerFast",
         "model_max_length": 1000000}))


@pytest.fixture(scope="module")
def bench(trained):  # noqa: F811
    llama_cpp_module()
    d = work_dir() / "quantize-quality-trained"
    shutil.rmtree(d, ignore_errors=True)
    hf = d / "hf"
    hf.mkdir(parents=True)
    for name in ("model.safetensors", "config.json"):
        (hf / name).symlink_to((trained / name).resolve())
    write_byte_tokenizer(hf)
    f32 = d / "trained-tiny-f32.gguf"
    g4.convert(hf, f32, "f32")

    calib, evalt = d / "mark.txt", d / "matthew.txt"
    calib.write_text(trainer.bible_text(CALIB_RANGE))
    text = trainer.bible_text(trainer.EVAL_RANGE)
    evalt.write_text(text)
    # The GGUF's tokenizer is the trainer's byte code, and the GGUF is the checkpoint.
    cp = run_lumen("tokenize", "-m", f32, "--file", evalt)
    assert cp.returncode == 0, describe(cp)
    assert json.loads(cp.stdout) == trainer.encode(text), "the GGUF does not tokenize as the trainer encodes"
    ids = trainer.eval_ids(CTX)
    logits = []
    for m in (f32, trained):
        out = d / f"logits{len(logits)}.npy"
        cp = run_lumen("logits", "-m", m, "--tokens", tokens_arg(ids), "--out", out)
        assert cp.returncode == 0, describe(cp)
        logits.append(np.load(out))
    assert np.abs(logits[0] - logits[1]).max() <= 1e-5 * np.abs(logits[1]).max()

    imatrix = d / "imatrix.gguf"
    lumen("imatrix", "-m", f32, "-f", calib, "-o", imatrix, "--ctx", CTX, "--chunks", CALIB_CHUNKS)
    base = d / "base.kld"
    lumen("perplexity", "-m", f32, "-f", evalt, "--ctx", CTX, "--chunks", EVAL_CHUNKS, "--kl-divergence-base", base)
    return {"dir": d, "f32": f32, "imatrix": imatrix, "base": base}


def test_lumen_quantizes_the_trained_gemma4_as_well_as_llama_cpp(bench):
    matrices = sum(1 for t in tensor_types(bench["f32"]).items() if t[0].endswith(".weight") and "norm" not in t[0]
                   and t[0] != "rope_freqs.weight")

    def block_counts(qtype, theirs_types):
        counts = Counter(t for t in theirs_types.values() if t != "F32")
        return {"matrices": matrices, "main_type_tensors": counts.get(BLOCK[qtype], 0),
                "tensor_types": dict(sorted(counts.items()))}

    def types_column(r):
        return " ".join(f"{k}:{v}" for k, v in r["tensor_types"].items())

    types_column.title = "tensor types"
    rows, failures = compare_with_llama_cpp(bench, "quantize_quality_trained", block_counts)
    print(f"\ntrained tiny Gemma 4 (gemma4 GGUF), {rows[0]['positions']} positions, f32 PPL {rows[0]['base_ppl']:.3f}")
    print_comparison(rows, types_column)
    assert not failures, "\n".join(failures)
