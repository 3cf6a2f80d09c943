#!/usr/bin/env python3
"""Writes tiny random Gemma 3 GGUF files with llama.cpp's own Python writer (PyPI `gguf`).

    make_tiny_gemma3_gguf.py OUT.gguf [--seed S] [--window W] [--layers L]

The layout is what llama.cpp's converter writes for the `gemma3` architecture: its metadata
keys, tensor names (token_embd, blk.N.attn_q, ..., output_norm), norm gains with Gemma's "+1"
folded in (values near 1), projections quantized with gguf-py (Q8_0, Q5_0, Q4_K... as asked)
and a small SentencePiece-style vocabulary in tokenizer.ggml.*. Tests also use build() with
`mutate` to produce broken files (a wrong architecture, a missing or misshapen tensor...).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as Q
except ImportError as e:  # pragma: no cover - a setup problem, said plainly
    sys.exit(f"make_tiny_gemma3_gguf.py needs gguf (pip install gguf==0.19.0): {e}")

VOCAB = 300
HIDDEN = 64
HEADS = 2
KV_HEADS = 1
# 256, as in every Gemma 3 but the 27B: transformers' GGUF loader keeps Gemma3TextConfig's
# query_pre_attn_scalar default (256) whatever the head dim, while llama.cpp (and Lumen) scale
# by head_dim^-1/2; with 256 both agree.
HEAD_DIM = 256
FFN = 128


def tensors(seed: int, layers: int, qtypes: dict | None = None) -> dict:
    """name -> (float32 array in row-major [out, in] shape, ggml type to store it as)."""
    rng = np.random.default_rng(seed)
    qtypes = qtypes or {}
    out: dict = {}

    def mat(name, rows, cols, default):
        out[name] = ((rng.standard_normal((rows, cols)) * 0.15).astype(np.float32), qtypes.get(name, default))

    def norm(name, n):
        out[name] = ((1.0 + rng.standard_normal(n) * 0.1).astype(np.float32), Q.F32)

    out["token_embd.weight"] = ((rng.standard_normal((VOCAB, HIDDEN)) * 0.5).astype(np.float32),
                                qtypes.get("token_embd.weight", Q.Q8_0))
    q_dim, kv_dim = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    kinds = [Q.Q8_0, Q.Q5_0, Q.Q4_0, Q.F16]
    for l in range(layers):
        p = f"blk.{l}."
        norm(p + "attn_norm.weight", HIDDEN)
        mat(p + "attn_q.weight", q_dim, HIDDEN, kinds[l % 4])
        mat(p + "attn_k.weight", kv_dim, HIDDEN, kinds[(l + 1) % 4])
        mat(p + "attn_v.weight", kv_dim, HIDDEN, Q.Q8_0)
        mat(p + "attn_output.weight", HIDDEN, q_dim, kinds[(l + 2) % 4])
        norm(p + "attn_q_norm.weight", HEAD_DIM)
        norm(p + "attn_k_norm.weight", HEAD_DIM)
        norm(p + "post_attention_norm.weight", HIDDEN)
        norm(p + "ffn_norm.weight", HIDDEN)
        mat(p + "ffn_gate.weight", FFN, HIDDEN, kinds[(l + 3) % 4])
        mat(p + "ffn_up.weight", FFN, HIDDEN, Q.Q8_0)
        mat(p + "ffn_down.weight", HIDDEN, FFN, Q.Q5_0)
        norm(p + "post_ffw_norm.weight", HIDDEN)
    norm("output_norm.weight", HIDDEN)
    return out


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    tokens = specials + [f"<0x{b:02X}>" for b in range(256)]
    tokens += ["<start_of_turn>", "<end_of_turn>"]
    tokens += [f"\u2581w{i}" for i in range(VOCAB - len(tokens))]
    scores = [0.0] * len(specials) + [0.0] * 256 + [0.0, 0.0] + [-float(i) for i in range(VOCAB - 262)]
    types = [3, 3, 3, 2] + [6] * 256 + [3, 3] + [1] * (VOCAB - 262)
    return tokens, scores, types


def build(path, seed: int = 0, window: int = 4, layers: int = 6, arch: str = "gemma3",
          mutate=None) -> None:
    """Writes the file. mutate(meta: dict, tensors: dict) may edit the metadata (key without
    the architecture prefix -> (value, GGUFValueType)) and the tensor table before writing."""
    meta = {
        "context_length": (128, gguf.GGUFValueType.UINT32),
        "embedding_length": (HIDDEN, gguf.GGUFValueType.UINT32),
        "block_count": (layers, gguf.GGUFValueType.UINT32),
        "feed_forward_length": (FFN, gguf.GGUFValueType.UINT32),
        "attention.head_count": (HEADS, gguf.GGUFValueType.UINT32),
        "attention.head_count_kv": (KV_HEADS, gguf.GGUFValueType.UINT32),
        "attention.key_length": (HEAD_DIM, gguf.GGUFValueType.UINT32),
        "attention.value_length": (HEAD_DIM, gguf.GGUFValueType.UINT32),
        "attention.layer_norm_rms_epsilon": (1e-6, gguf.GGUFValueType.FLOAT32),
        "attention.sliding_window": (window, gguf.GGUFValueType.UINT32),
        "rope.freq_base": (1000000.0, gguf.GGUFValueType.FLOAT32),
    }
    table = tensors(seed, layers)
    if mutate is not None:
        mutate(meta, table)
    w = gguf.GGUFWriter(str(path), arch)
    for key, (value, vtype) in meta.items():
        w.add_key_value(f"{arch}.{key}", value, vtype)
    tokens, scores, types = vocabulary()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    for name, (array, qtype) in table.items():
        if qtype == Q.F32:
            w.add_tensor(name, array.astype(np.float32))
        elif qtype == Q.F16:
            w.add_tensor(name, array.astype(np.float16))
        elif qtype == Q.F64:
            w.add_tensor(name, array.astype(np.float64))
        else:
            w.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--layers", type=int, default=6)
    args = parser.parse_args(argv)
    build(args.out, seed=args.seed, window=args.window, layers=args.layers)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
