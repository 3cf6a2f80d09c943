#!/usr/bin/env python3
"""A Gemma 4 GGUF of a real model's shapes with random weights, in one of llama.cpp's quantization
mixes, that llama.cpp and Lumen both load: the file the speed comparisons run on.

    make_gemma4_shape_gguf.py [--config tools/configs/gemma-4-12b-shapes.json] [--type Q4_K_M]
                              [--out /work/models/gemma-4-12b-shape-q4_k_m.gguf] [--seed 0] [--threads 2]

Three steps, none of which holds a tensor of the model in memory:
  1. a skeleton F16 GGUF with the config's keys and tensors exactly as llama.cpp's converter names
     and orders them (tools/gemma4_gguf.py write_metadata), a synthetic 262144-entry Gemma 4
     vocabulary, real values for the small F32 tensors (norm gains, layer scalars, rope_freqs) and
     a sparse hole for every matrix (no disk blocks: the file reads as zeros);
  2. llama.cpp's own quantizer (llama-cpp-python's llama_model_quantize) turns the skeleton into
     the requested mix, so every tensor gets the type, and the file the layout, that a real
     Q4_K_M (...) file of this model has;
  3. every block of every quantized tensor is overwritten in place with random quants and small
     positive scales (a seeded stream, 64 MiB at a time): finite, varied weights, of the sizes
     the real model's are.
The skeleton is deleted; the output is written as OUT.tmp and renamed. Generated files belong
outside git (/work/models by default).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gemma4_gguf as g4  # noqa: E402

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as Q  # noqa: E402

DEFAULT_CONFIG = Path(__file__).resolve().parent / "configs" / "gemma-4-12b-shapes.json"
CHUNK_BYTES = 64 << 20

# Byte offsets of the f16 scale fields inside one block of each ggml type (the rest of a block is
# quants or sub-block scales, where any byte value is valid).
F16_FIELDS = {
    Q.Q4_0: [0], Q.Q4_1: [0, 2], Q.Q5_0: [0], Q.Q5_1: [0, 2], Q.Q8_0: [0], Q.Q2_K: [80, 82],
    Q.Q3_K: [108], Q.Q4_K: [0, 2], Q.Q5_K: [0, 2], Q.Q6_K: [208], Q.IQ4_NL: [0], Q.IQ4_XS: [0],
}
# f16 values for those fields, chosen so that the weights come out with a standard deviation of
# about 0.02 (a trained model's) given uniformly random quants and sub-block scales: (d, dmin) per
# type, from each format's dequantization (w = d * scale * q - dmin * min, the quants' spread).
F16_VALUES = {
    Q.Q8_0: (2.7e-4,), Q.Q4_0: (4.3e-3,), Q.Q4_1: (4.3e-3, -3.2e-2), Q.Q5_0: (2.2e-3,),
    Q.Q5_1: (2.2e-3, -3.4e-2), Q.Q2_K: (2.5e-3, 3.7e-3), Q.Q3_K: (5e-4,), Q.Q4_K: (1.4e-4, 1.05e-3),
    Q.Q5_K: (7e-5, 1.1e-3), Q.Q6_K: (1.5e-5,), Q.IQ4_NL: (3e-4,), Q.IQ4_XS: (1.6e-5,),
}
WEIGHT_STD = 0.02  # F16 / BF16 matrices


def synthetic_vocab(n: int):
    """Gemma 4's special ids, byte tokens, then distinct filler pieces; a few merges."""
    tokens = []
    for i in range(n):
        if i in g4.SPECIAL_IDS:
            tokens.append(g4.SPECIAL_IDS[i])
        elif i == g4.NEWLINE_ID:
            tokens.append("\n")
        elif g4.FIRST_BYTE_ID <= i < g4.FIRST_BYTE_ID + 256:
            tokens.append(f"<0x{i - g4.FIRST_BYTE_ID:02X}>")
        elif i < g4.FIRST_BYTE_ID:
            tokens.append(f"<unused{i}>")
        else:
            tokens.append(f"\u2581t{i}")
    types = [gguf.TokenType.NORMAL if i == g4.NEWLINE_ID or i >= g4.FIRST_BYTE_ID + 256 else
             gguf.TokenType.CONTROL if i < g4.FIRST_BYTE_ID else gguf.TokenType.BYTE for i in range(n)]
    merges = ["\u2581 t", "\u2581t 1"]
    return tokens, types, merges


def tensor_plan(hp: dict):
    """(name, shape [rows, cols] or [n], F32 values or None for a matrix) in the converter's order."""
    hidden, ffn, layers = hp["hidden_size"], hp["intermediate_size"], hp["num_hidden_layers"]
    heads, kv = hp["num_attention_heads"], hp["num_key_value_heads"]
    hd, hd_full = hp["head_dim"], hp["global_head_dim"]
    kv_full = hp.get("num_global_key_value_heads") or kv
    k_eq_v = hp.get("attention_k_eq_v", False)
    rng = np.random.default_rng(12345)
    plan = [("rope_freqs.weight", [hd_full // 2], g4.rope_freqs(hp)),
            ("token_embd.weight", [hp["vocab_size"], hidden], None)]
    for i, kind in enumerate(hp["layer_types"]):
        full = kind == "full_attention"
        d, n_kv = (hd_full, kv_full) if full else (hd, kv)
        p = f"blk.{i}."

        def norm(n, lo=0.5, hi=1.5):
            return (lo + (hi - lo) * rng.random(n)).astype(np.float32)

        plan += [(p + "attn_norm.weight", [hidden], norm(hidden)),
                 (p + "layer_output_scale.weight", [1], norm(1, 0.3, 0.9)),
                 (p + "ffn_down.weight", [hidden, ffn], None),
                 (p + "ffn_gate.weight", [ffn, hidden], None),
                 (p + "ffn_up.weight", [ffn, hidden], None),
                 (p + "post_attention_norm.weight", [hidden], norm(hidden)),
                 (p + "post_ffw_norm.weight", [hidden], norm(hidden)),
                 (p + "ffn_norm.weight", [hidden], norm(hidden)),
                 (p + "attn_k_norm.weight", [d], norm(d, 0.25, 0.75)),
                 (p + "attn_k.weight", [n_kv * d, hidden], None),
                 (p + "attn_output.weight", [hidden, heads * d], None),
                 (p + "attn_q.weight", [heads * d, hidden], None),
                 (p + "attn_q_norm.weight", [d], norm(d, 0.25, 0.75))]
        if not (full and k_eq_v):
            plan.append((p + "attn_v.weight", [n_kv * d, hidden], None))
    plan.append(("output_norm.weight", [hidden], (2.0 + 2.0 * rng.random(hidden)).astype(np.float32)))
    return plan


def write_skeleton(hp: dict, path: Path) -> None:
    """The F16 skeleton: real small tensors, sparse holes for the matrices."""
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GEMMA4])
    w.add_name("gemma-4-shape-random")
    g4.write_metadata(w, hp, gguf.LlamaFileType.MOSTLY_F16)
    tokens, types, merges = synthetic_vocab(hp["vocab_size"])
    w.add_tokenizer_model("gemma4")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    plan = tensor_plan(hp)
    for name, shape, values in plan:
        dtype = np.float32 if values is not None else np.float16
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        w.add_tensor_info(name, shape, np.dtype(dtype), nbytes, raw_dtype=Q.F32 if values is not None else Q.F16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    align = gguf.GGUF_DEFAULT_ALIGNMENT
    with open(path, "r+b") as f:
        f.seek(0, os.SEEK_END)
        offset = (f.tell() + align - 1) // align * align
        for name, shape, values in plan:
            nbytes = int(np.prod(shape)) * (4 if values is not None else 2)
            if values is not None:
                f.seek(offset)
                f.write(values.astype("<f4").tobytes())
            offset += (nbytes + align - 1) // align * align
        f.truncate(offset)  # the holes stay sparse


def fill_random(path: Path, seed: int) -> dict:
    """Overwrites every quantized tensor's blocks with random quants and small f16 scales."""
    reader = gguf.GGUFReader(str(path))
    rng = np.random.default_rng(seed)
    counts: dict = {}
    with open(path, "r+b") as f:
        for t in reader.tensors:
            qt = Q(t.tensor_type)
            counts[qt.name] = counts.get(qt.name, 0) + 1
            if qt == Q.F32:
                continue  # norms, layer scalars, rope_freqs: the skeleton's values, copied
            block_size, type_size = gguf.GGML_QUANT_SIZES[qt]
            if qt not in F16_FIELDS and qt not in (Q.F16, Q.BF16):
                raise SystemExit(f"make_gemma4_shape_gguf: no random-block rule for {qt.name} ({t.name})")
            start = int(t.data_offset)  # absolute: GGUFReader adds the data section start
            total = int(t.n_bytes)
            step = max(type_size, CHUNK_BYTES // type_size * type_size)
            for at in range(0, total, step):
                n = min(step, total - at)
                if qt in (Q.F16, Q.BF16):
                    vals = (rng.standard_normal(n // 2) * WEIGHT_STD).astype(np.float32)
                    raw = (vals.astype(np.float16).view(np.uint8) if qt == Q.F16
                           else (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8))
                else:
                    raw = rng.integers(0, 256, size=n, dtype=np.uint8)
                    blocks = raw.reshape(-1, type_size)
                    for field, value in zip(F16_FIELDS[qt], F16_VALUES[qt]):
                        d = (value * (0.75 + 0.5 * rng.random(blocks.shape[0]))).astype(np.float16)
                        blocks[:, field:field + 2] = d.view(np.uint8).reshape(-1, 2)
                f.seek(start + at)
                f.write(raw.tobytes())
    return counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(DEFAULT_CONFIG))
    ap.add_argument("--type", default="Q4_K_M", choices=list(g4.QUANT_FTYPES))
    ap.add_argument("--out", default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    hp = json.loads(Path(a.config).read_text())
    hp = hp.get("text_config", hp)
    out = Path(a.out or f"/work/models/{Path(a.config).stem}-{a.type.lower()}.gguf")
    out.parent.mkdir(parents=True, exist_ok=True)
    skeleton = out.with_name(out.name + ".skeleton-f16")
    tmp = out.with_name(out.name + ".tmp")
    t0 = time.time()
    try:
        write_skeleton(hp, skeleton)
        print(f"skeleton {skeleton} ({skeleton.stat().st_size / 1e9:.1f} GB sparse) in {time.time() - t0:.0f} s",
              flush=True)
        g4.quantize(skeleton, tmp, a.type, a.threads)
        print(f"quantized by llama.cpp to {a.type} in {time.time() - t0:.0f} s", flush=True)
        counts = fill_random(tmp, a.seed)
        os.replace(tmp, out)
    finally:
        for p in (skeleton, tmp):
            if p.exists():
                p.unlink()
    print(f"wrote {out} ({out.stat().st_size / 1e9:.2f} GB, tensors by type {counts}) in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
