#!/usr/bin/env python3
"""A Gemma 3 GGUF file -> a Hugging Face checkpoint directory (what Google's converter wants).

    gguf_to_hf_checkpoint.py MODEL.gguf OUT_DIR [--dtype f32|bf16]

Writes OUT_DIR/model.safetensors (every tensor dequantized with gguf-py's own ggml block
arithmetic, in HF names and layouts), OUT_DIR/config.json (a `gemma3_text` config from the
file's metadata) and OUT_DIR/tokenizer.model (a SentencePiece ModelProto whose pieces, scores
and types are the file's tokenizer.ggml.* arrays, so ids are identical to the GGUF's).

Why each transformation:
  - llama.cpp's Gemma 3 converter stores every RMSNorm gain as (w + 1); HF stores w and the
    model computes x * (1 + w), so 1 is subtracted back (exact for gains in [0.5, 2], Sterbenz).
  - llama.cpp does not permute Gemma's Q/K rows, so projections copy as they are: a GGUF tensor
    with ne = [in, out] is the row-major [out, in] matrix HF expects.
  - GGUF marks <unk> as a control token; SentencePiece needs exactly one UNKNOWN piece, so the
    piece at tokenizer.ggml.unknown_token_id gets type UNKNOWN.
The output is written to OUT_DIR.tmp and renamed, so a failed run leaves nothing half-written.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

# GGUF tensor name suffix -> HF name suffix inside model.layers.N.
LAYER_NAMES = {
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "attn_norm.weight": "input_layernorm.weight",
    "post_attention_norm.weight": "post_attention_layernorm.weight",
    "ffn_norm.weight": "pre_feedforward_layernorm.weight",
    "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight"}

SLIDING_PATTERN = 6          # Gemma 3: every 6th layer is global (llama.cpp's swa pattern)
LOCAL_ROPE_THETA = 10000.0   # Gemma 3 sliding layers (not in the GGUF metadata)


def fail(msg: str) -> None:
    print(f"gguf_to_hf_checkpoint: error: {msg}", file=sys.stderr)
    sys.exit(1)


def _field(reader, key: str, default=None):
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            fail(f"{reader.path}: missing metadata key {key}")
        return default
    return f.contents()


def hf_name(gguf_name: str) -> str:
    if gguf_name in GLOBAL_NAMES:
        return GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in LAYER_NAMES:
        return f"model.layers.{int(parts[1])}.{LAYER_NAMES[parts[2]]}"
    fail(f"tensor {gguf_name}: no Hugging Face name for it (not a Gemma 3 GGUF tensor)")
    raise AssertionError


def dequantized(tensor) -> np.ndarray:
    from gguf import quants

    data = quants.dequantize(tensor.data, tensor.tensor_type)
    shape = tuple(int(x) for x in reversed(tensor.shape))  # ne is fastest-first
    return np.ascontiguousarray(np.asarray(data, dtype=np.float32).reshape(shape))


def config_from_gguf(reader) -> dict:
    arch = _field(reader, "general.architecture")
    if arch != "gemma3":
        fail(f"{reader.path}: general.architecture is {arch!r}, this tool handles gemma3 only")
    a = lambda k, d=None: _field(reader, f"gemma3.{k}", d)  # noqa: E731
    n_layers = int(a("block_count"))
    n_heads = int(a("attention.head_count"))
    head_dim = int(a("attention.key_length"))
    hidden = int(a("embedding_length"))
    layer_types = ["full_attention" if (i + 1) % SLIDING_PATTERN == 0 else "sliding_attention"
                   for i in range(n_layers)]
    vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    return {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": "gemma3_text",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": None,
        "final_logit_softcapping": None,
        "bos_token_id": int(_field(reader, "tokenizer.ggml.bos_token_id")),
        "eos_token_id": int(_field(reader, "tokenizer.ggml.eos_token_id")),
        "pad_token_id": int(_field(reader, "tokenizer.ggml.padding_token_id", 0)),
        "head_dim": head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": hidden,
        "intermediate_size": int(a("feed_forward_length")),
        "layer_types": layer_types,
        "max_position_embeddings": int(a("context_length")),
        "num_attention_heads": n_heads,
        "num_hidden_layers": n_layers,
        "num_key_value_heads": int(a("attention.head_count_kv")),
        "query_pre_attn_scalar": head_dim,
        "rms_norm_eps": float(a("attention.layer_norm_rms_epsilon")),
        "rope_local_base_freq": LOCAL_ROPE_THETA,
        "rope_scaling": None,
        "rope_theta": float(a("rope.freq_base")),
        "sliding_window": int(a("attention.sliding_window")),
        "sliding_window_pattern": SLIDING_PATTERN,
        "tie_word_embeddings": True,
        "use_cache": True,
        "vocab_size": vocab,
    }


def sentencepiece_model(reader) -> bytes:
    from sentencepiece import sentencepiece_model_pb2 as spm

    if _field(reader, "tokenizer.ggml.model") != "llama":
        fail(f"{reader.path}: tokenizer.ggml.model is not 'llama' (SentencePiece)")
    pieces = _field(reader, "tokenizer.ggml.tokens")
    scores = _field(reader, "tokenizer.ggml.scores")
    types = _field(reader, "tokenizer.ggml.token_type")
    if not (len(pieces) == len(scores) == len(types)):
        fail(f"{reader.path}: tokenizer.ggml.tokens/scores/token_type lengths differ")
    unk = int(_field(reader, "tokenizer.ggml.unknown_token_id"))
    m = spm.ModelProto()
    for i, (p, s, t) in enumerate(zip(pieces, scores, types)):
        sp = m.pieces.add()
        sp.piece = p
        sp.score = float(s)
        sp.type = spm.ModelProto.SentencePiece.UNKNOWN if i == unk else int(t)
    ts = m.trainer_spec
    ts.model_type = spm.TrainerSpec.BPE
    ts.vocab_size = len(pieces)
    ts.byte_fallback = any(int(t) == 6 for t in types)
    ts.unk_id = unk
    ts.bos_id = int(_field(reader, "tokenizer.ggml.bos_token_id"))
    ts.eos_id = int(_field(reader, "tokenizer.ggml.eos_token_id"))
    ts.pad_id = int(_field(reader, "tokenizer.ggml.padding_token_id", 0))
    ts.unk_piece, ts.bos_piece = pieces[unk], pieces[ts.bos_id]
    ts.eos_piece, ts.pad_piece = pieces[ts.eos_id], pieces[ts.pad_id]
    add_prefix = bool(_field(reader, "tokenizer.ggml.add_space_prefix", False))
    ns = m.normalizer_spec
    ns.name = "identity"
    ns.add_dummy_prefix = add_prefix
    ns.remove_extra_whitespaces = False
    ns.escape_whitespaces = True
    return m.SerializeToString()


def convert(gguf_path: Path, out_dir: Path, dtype: str = "f32") -> None:
    import gguf
    from safetensors.numpy import save_file

    reader = gguf.GGUFReader(str(gguf_path))
    config = config_from_gguf(reader)
    tensors: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        name = hf_name(t.name)
        w = dequantized(t)
        if name.endswith("norm.weight"):
            w = w - np.float32(1.0)
        tensors[name] = w
    expected = 2 + 13 * config["num_hidden_layers"]
    if len(tensors) != expected:
        fail(f"{gguf_path}: {len(tensors)} tensors, a Gemma 3 of {config['num_hidden_layers']} layers has {expected}")
    if dtype == "bf16":
        import torch
        from safetensors.torch import save_file as save_torch

        saver = lambda d, p: save_torch({k: torch.from_numpy(v).to(torch.bfloat16) for k, v in d.items()}, p)  # noqa: E731
        config["torch_dtype"] = "bfloat16"
    else:
        saver = lambda d, p: save_file(d, p, metadata={"format": "pt"})  # noqa: E731
        config["torch_dtype"] = "float32"
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    saver(tensors, str(tmp / "model.safetensors"))
    (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (tmp / "tokenizer.model").write_bytes(sentencepiece_model(reader))
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("gguf", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    args = p.parse_args(argv)
    if not args.gguf.is_file():
        fail(f"{args.gguf}: no such file")
    convert(args.gguf, args.out, args.dtype)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
