#!/usr/bin/env python3
"""Deterministic builder of tiny Gemma 4 text checkpoints, made by transformers itself.

    make_tiny_gemma4.py --preset tiny-mixed --out DIR [--seed N] [--dtype bfloat16|float32]
                        [--shard-size 150KB] [--wrapper]
    make_tiny_gemma4.py --list

The model is a real `Gemma4ForCausalLM` (or, with --wrapper, a text-only
`Gemma4ForConditionalGeneration` whose tensors are named `model.language_model.*`), built from a
`Gemma4TextConfig`. Every stored tensor is then overwritten from a per-tensor `torch.Generator`
seeded from (seed, tensor name), so a checkpoint depends only on preset, seed and dtype:

  * projections (q/k/v/o, gate/up/down): N(0, 1) / sqrt(fan_in)  (activations stay O(1));
  * embed_tokens: N(0, 1) / sqrt(hidden), so embed * sqrt(hidden) enters the residual at RMS 1,
    the size of each block's (post-normed) output: the model does not just echo its input;
  * input/post-attention/pre-ffn/post-ffn RMSNorm gains: U[0.5, 1.5];
  * final norm gain: U[2.0, 4.0], which with the unit-size tied embedding gives logits of std ~3:
    varied, in tanh's curved part (|logit| up to ~15) but nowhere near the 30 softcap;
  * q_norm / k_norm gains: U[0.25, 0.75] (attention logits of std ~1: soft, position-dependent);
  * layer_scalar (a persistent buffer): U[0.3, 0.9].

Non-persistent buffers (RoPE inverse frequencies, embed_scale) are derived from the config, are
not stored in the checkpoint, and are left as transformers computes them.

config.json is what save_pretrained writes (this transformers release stores the full-attention
layers' head_dim / kv-head overrides as `per_layer_config`), plus the `global_head_dim` and
`num_global_key_value_heads` keys that Google's published configs carry; the builder checks that
transformers resolves both spellings to the same per-layer geometry.

Python is used here for tests and tools only; the engine never imports this.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import re
import sys
import zlib
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

S = "sliding_attention"
F = "full_attention"

EMBED_RMS = 1.0                # RMS of embed_tokens * sqrt(hidden): the embedding's size in the residual
NORM_RANGE = (0.5, 1.5)        # RMSNorm gains on the hidden state, in every layer
FINAL_NORM_RANGE = (2.0, 4.0)  # final norm gain: sets the logit std (~3) with a unit-size embedding
QK_NORM_RANGE = (0.25, 0.75)   # q_norm / k_norm gains
LAYER_SCALAR_RANGE = (0.3, 0.9)

_COMMON = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    global_head_dim=32,
    num_global_key_value_heads=1,
    sliding_window=8,
    max_position_embeddings=512,
    hidden_size_per_layer_input=0,
    vocab_size_per_layer_input=512,
    num_kv_shared_layers=0,
    tie_word_embeddings=True,
    final_logit_softcapping=30.0,
    attention_k_eq_v=True,
    rms_norm_eps=1e-6,
    hidden_activation="gelu_pytorch_tanh",
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)


def _rope(partial_rotary_factor: float) -> dict:
    return {
        S: {"rope_type": "default", "rope_theta": 10000.0},
        F: {"rope_type": "proportional", "partial_rotary_factor": partial_rotary_factor, "rope_theta": 1000000.0},
    }


def _preset(**over) -> dict:
    p = copy.deepcopy(_COMMON)
    p["rope_parameters"] = _rope(0.25)
    p.update(over)
    p["num_hidden_layers"] = len(p["layer_types"])
    p["vocab_size_per_layer_input"] = p["vocab_size"]
    return p


PRESETS: dict[str, dict] = {
    # 2 sliding, 1 full, twice; k == v on full layers (1 global KV head, head_dim 32).
    "tiny-mixed": _preset(layer_types=[S, S, F, S, S, F]),
    # wider heads, window 16, NO final softcap, partial rotary 0.5 on full layers.
    "tiny-wide": _preset(
        layer_types=[S, F, S, F],
        num_attention_heads=8, num_key_value_heads=4, head_dim=32, global_head_dim=64,
        num_global_key_value_heads=1, sliding_window=16, final_logit_softcapping=None,
        rope_parameters=_rope(0.5),
    ),
    # attention_k_eq_v false: full layers have their own v_proj and the regular KV head count.
    "tiny-kv": _preset(
        layer_types=[S, S, F], sliding_window=4, attention_k_eq_v=False,
        num_global_key_value_heads=None,
    ),
    # the real vocabulary size; narrow to keep the file small (16 MiB of bf16 embedding).
    "tiny-vocab262k": _preset(
        layer_types=[S, S, F, S, S, F], vocab_size=262144, hidden_size=32, intermediate_size=64,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, global_head_dim=32,
        num_global_key_value_heads=1,
    ),
    # RoPE scaling: the full layers' proportional RoPE with factor 8 (inv_freq / 8), the
    # value the 12B manifest's stray rope_scaling carries; Lumen treats it as an option.
    "tiny-rope-factor": _preset(
        layer_types=[S, F, S, F],
        rope_parameters={
            S: {"rope_type": "default", "rope_theta": 10000.0},
            F: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                "factor": 8.0},
        },
    ),
    # GGUF block formats: every matrix's row length (hidden 256, q widths 256 / 512, ffn 512) a
    # multiple of 256, so llama.cpp's K-quants and IQ4_XS apply to every matrix.
    "tiny-k256": _preset(
        layer_types=[S, S, F, S, F], hidden_size=256, intermediate_size=512,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, global_head_dim=128,
        num_global_key_value_heads=1, sliding_window=8,
    ),
    # the 12B's 5 sliding : 1 full pattern, last layer full.
    "tiny-12b-pattern": _preset(
        layer_types=([S] * 5 + [F]) * 2, hidden_size=48, intermediate_size=96,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
        num_global_key_value_heads=1, sliding_window=8,
    ),
    # ---- the rest of the family (E2B/E4B, 26B-A4B): one feature each, then all together.
    # per-layer input embeddings only (E2B/E4B's PLE table, projection and per-layer gates).
    "tiny-ple": _preset(layer_types=[S, S, F, S, F], hidden_size_per_layer_input=32),
    # KV sharing only: the last 3 layers read the KV of layer 2 (sliding) / 3 (full).
    "tiny-kvshare": _preset(layer_types=[S, S, S, F, S, F, F], num_kv_shared_layers=3,
                            attention_k_eq_v=False, num_global_key_value_heads=None),
    # PLE and KV sharing together (E4B's layout: no double-wide MLP).
    "tiny-ple-kvshare": _preset(layer_types=[S, S, F, S, S, F], num_kv_shared_layers=3,
                                hidden_size_per_layer_input=16, attention_k_eq_v=False,
                                num_global_key_value_heads=None),
    # E2B's layout: per-layer inputs, KV sharing and the double-wide MLP (no k == v).
    "tiny-e2b": _preset(layer_types=[S, S, F, S, S, F], num_kv_shared_layers=3, hidden_size_per_layer_input=16,
                        use_double_wide_mlp=True, attention_k_eq_v=False, num_global_key_value_heads=None),
    # the double-wide MLP: KV-shared layers have 2 x intermediate_size (E2B has it, with PLE).
    "tiny-doublewide": _preset(layer_types=[S, F, S, S, F], num_kv_shared_layers=2,
                               use_double_wide_mlp=True, attention_k_eq_v=False,
                               num_global_key_value_heads=None),
    # mixture of experts (26B-A4B): dense MLP + 8 experts, several top-k.
    "tiny-moe-k1": _preset(layer_types=[S, S, F], enable_moe_block=True, num_experts=8,
                           top_k_experts=1, moe_intermediate_size=24),
    "tiny-moe-k2": _preset(layer_types=[S, F, S, F], enable_moe_block=True, num_experts=8,
                           top_k_experts=2, moe_intermediate_size=24),
    "tiny-moe-k5": _preset(layer_types=[S, S, F], enable_moe_block=True, num_experts=6,
                           top_k_experts=5, moe_intermediate_size=40),
    # everything at once: PLE, KV sharing, double-wide MLP, MoE, k == v on full layers.
    "tiny-all": _preset(layer_types=[S, S, F, S, F, S, F], num_kv_shared_layers=3,
                        hidden_size_per_layer_input=32, use_double_wide_mlp=True,
                        enable_moe_block=True, num_experts=8, top_k_experts=3,
                        moe_intermediate_size=24),
}


def preset_config_dict(preset: str) -> dict:
    if preset not in PRESETS:
        raise KeyError(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    return copy.deepcopy(PRESETS[preset])


def make_text_config(preset: str):
    from transformers import Gemma4TextConfig

    return Gemma4TextConfig(**preset_config_dict(preset))


def parse_size(s) -> int | None:
    """'150KB', '1MiB', '200000' -> bytes (KB/MB are 1000-based, KiB/MiB 1024-based)."""
    if s is None:
        return None
    if isinstance(s, int):
        return s
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B?|B)?\s*", str(s), re.IGNORECASE)
    if not m:
        raise ValueError(f"bad size {s!r}")
    num = float(m.group(1))
    unit = (m.group(2) or "B").upper().rstrip("B")
    mult = {"": 1, "K": 1000, "M": 1000**2, "G": 1000**3, "KI": 1024, "MI": 1024**2, "GI": 1024**3}[unit]
    return int(num * mult)


def _tensor_seed(seed: int, name: str) -> int:
    # Stable across runs and independent of the order tensors are visited in.
    return (int(seed) * 1_000_003 + zlib.crc32(name.encode())) % (2**62)


def _rule(name: str, shape) -> str:
    if name.endswith("embed_tokens.weight"):
        return "embed"
    if name.endswith("embed_tokens_per_layer.weight"):
        return "ple_embed"
    if name.endswith("router.proj.weight"):
        return "router"
    if name.endswith("router.scale") or name.endswith("router.per_expert_scale"):
        return "norm"
    if name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
        return "experts"
    if len(shape) == 2 and name.endswith(("per_layer_model_projection.weight", "per_layer_input_gate.weight",
                                          "per_layer_projection.weight")):
        return "proj"
    if re.search(r"layernorm_\d\.weight$", name) or name.endswith(("per_layer_projection_norm.weight",
                                                                     "post_per_layer_input_norm.weight")):
        return "norm"
    if name.endswith("layer_scalar"):
        return "layer_scalar"
    if name.endswith("q_norm.weight") or name.endswith("k_norm.weight"):
        return "qk_norm"
    if name.endswith("model.norm.weight") or name.endswith("language_model.norm.weight"):
        return "final_norm"
    if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
        return "norm"
    if len(shape) == 2 and name.endswith("_proj.weight"):
        return "proj"
    raise ValueError(f"make_tiny_gemma4: no randomization rule for tensor {name} {tuple(shape)}")


def randomize_(model, seed: int, hidden_size: int, ple_width: int = 0) -> dict:
    """Overwrite every persistent parameter and buffer in place. Returns {name: rule}."""
    import torch

    torch.set_num_threads(1)
    sd_names = set(model.state_dict().keys())
    tensors = {}
    for name, p in model.named_parameters(remove_duplicate=True):
        tensors[name] = p
    for name, b in model.named_buffers(remove_duplicate=True):
        if name in sd_names:  # persistent buffers only (layer_scalar)
            tensors[name] = b
    # tied lm_head shares storage with embed_tokens: it is not a separate tensor.
    rules = {}
    with torch.no_grad():
        for name in sorted(tensors):
            t = tensors[name]
            rule = _rule(name, t.shape)
            g = torch.Generator().manual_seed(_tensor_seed(seed, name))
            if rule == "embed":
                v = torch.randn(t.shape, generator=g) * (EMBED_RMS / math.sqrt(hidden_size))
            elif rule == "ple_embed":
                # looked up times sqrt(per-layer width): enters each layer's gate at RMS ~1
                v = torch.randn(t.shape, generator=g) / math.sqrt(ple_width)
            elif rule == "proj":
                v = torch.randn(t.shape, generator=g) / math.sqrt(t.shape[1])
            elif rule == "experts":
                # [experts, out, in]: each expert's matrix like a projection
                v = torch.randn(t.shape, generator=g) / math.sqrt(t.shape[-1])
            elif rule == "router":
                # the router sees a unit-norm input: unit-size weights spread the expert scores
                # (std ~1), so top-k choices are far from ties
                v = torch.randn(t.shape, generator=g)
            else:
                lo, hi = {"norm": NORM_RANGE, "final_norm": FINAL_NORM_RANGE, "qk_norm": QK_NORM_RANGE,
                          "layer_scalar": LAYER_SCALAR_RANGE}[rule]
                v = lo + (hi - lo) * torch.rand(t.shape, generator=g)
            t.copy_(v.to(t.dtype))
            rules[name] = rule
    missing = sd_names - set(rules) - {"lm_head.weight"}
    if missing:
        raise RuntimeError(f"make_tiny_gemma4: tensors left unrandomized: {sorted(missing)}")
    return rules


def _check_not_default(model):
    import torch

    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if name not in model.state_dict():
            continue
        if bool(torch.all(t == 1.0)):
            raise RuntimeError(f"make_tiny_gemma4: {name} is 1.0 everywhere after randomization")
        if t.numel() > 1 and bool(torch.all(t == t.flatten()[0])):
            raise RuntimeError(f"make_tiny_gemma4: {name} is constant after randomization")


def _add_global_keys(cfg_json: dict, preset_dict: dict) -> None:
    cfg_json["global_head_dim"] = preset_dict["global_head_dim"]
    cfg_json["num_global_key_value_heads"] = preset_dict["num_global_key_value_heads"]


def _check_config_spellings(out: Path, wrapper: bool):
    """transformers must resolve config.json with and without per_layer_config identically."""
    from transformers import Gemma4TextConfig

    raw = json.loads((out / "config.json").read_text())
    text = raw["text_config"] if wrapper else raw
    a = {k: v for k, v in text.items() if k not in ("model_type", "transformers_version", "architectures")}
    b = {k: v for k, v in a.items() if k != "per_layer_config"}
    ca, cb = Gemma4TextConfig(**copy.deepcopy(a)), Gemma4TextConfig(**copy.deepcopy(b))
    for i in range(ca.num_hidden_layers):
        la, lb = ca.per_layer_config[i], cb.per_layer_config[i]
        if (la.head_dim, la.num_key_value_heads) != (lb.head_dim, lb.num_key_value_heads):
            raise RuntimeError(f"config spellings disagree at layer {i}")


def build(preset: str, out_dir, seed: int = 0, dtype: str = "bfloat16", shard_size=None,
          wrapper: bool = False) -> dict:
    """Build, randomize, save. Returns a summary dict."""
    import torch
    import transformers
    from transformers import Gemma4Config, Gemma4ForCausalLM, Gemma4ForConditionalGeneration

    transformers.utils.logging.disable_progress_bar()

    if dtype not in ("bfloat16", "float32"):
        raise ValueError(f"dtype must be bfloat16 or float32, not {dtype!r}")
    tdtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32
    pd = preset_config_dict(preset)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("model*.safetensors")) + [out / n for n in (
            "config.json", "model.safetensors.index.json", "generation_config.json")]:
        if old.exists():
            old.unlink()

    torch.manual_seed(seed)  # only affects transformers' own init, which we overwrite anyway
    text_cfg = make_text_config(preset)
    if wrapper:
        cfg = Gemma4Config(text_config=text_cfg.to_dict(), vision_config=None, audio_config=None,
                           tie_word_embeddings=True)
        model = Gemma4ForConditionalGeneration(cfg)
    else:
        model = Gemma4ForCausalLM(text_cfg)
    model.eval()
    rules = randomize_(model, seed, pd["hidden_size"], pd.get("hidden_size_per_layer_input") or 0)
    model = model.to(tdtype)
    _check_not_default(model)

    save_kw = dict(safe_serialization=True)
    sbytes = parse_size(shard_size)
    if sbytes is not None:
        save_kw["max_shard_size"] = sbytes
    model.save_pretrained(str(out), **save_kw)

    cfg_path = out / "config.json"
    cfg_json = json.loads(cfg_path.read_text())
    _add_global_keys(cfg_json["text_config"] if wrapper else cfg_json, pd)
    cfg_json.setdefault("dtype", dtype)
    cfg_path.write_text(json.dumps(cfg_json, indent=2, sort_keys=True) + "\n")
    gen = out / "generation_config.json"
    if gen.exists():
        gen.unlink()
    _check_config_spellings(out, wrapper)

    files = sorted(p.name for p in out.glob("*.safetensors"))
    n_params = sum(t.numel() for n, t in model.state_dict().items() if n != "lm_head.weight")
    summary = dict(
        preset=preset, out=str(out), seed=seed, dtype=dtype, wrapper=wrapper,
        layers=pd["num_hidden_layers"], hidden=pd["hidden_size"], vocab=pd["vocab_size"],
        layer_types=["full" if t == F else "sliding" for t in pd["layer_types"]],
        tensors=len(rules), params=n_params, files=files,
        index=(out / "model.safetensors.index.json").exists(),
    )
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset")
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--shard-size", default=None, help="max shard size: bytes or e.g. 150KB, 1MiB")
    ap.add_argument("--wrapper", action="store_true",
                    help="write a Gemma4ForConditionalGeneration checkpoint (model.language_model.*)")
    ap.add_argument("--list", action="store_true", help="list the presets and exit")
    a = ap.parse_args(argv)
    if a.list:
        for name, p in PRESETS.items():
            print(f"{name}: {json.dumps(p, sort_keys=True)}")
        return 0
    if not a.preset or not a.out:
        ap.error("--preset and --out are required (or --list)")
    if a.preset not in PRESETS:
        ap.error(f"unknown preset {a.preset!r}; known: {', '.join(PRESETS)}")
    s = build(a.preset, a.out, seed=a.seed, dtype=a.dtype, shard_size=a.shard_size, wrapper=a.wrapper)
    kinds = "".join("F" if t == "full" else "S" for t in s["layer_types"])
    print(s["out"])
    print(f"{s['preset']} seed={s['seed']} {s['dtype']}{' wrapper' if s['wrapper'] else ''}: "
          f"{s['layers']} layers [{kinds}] hidden={s['hidden']} vocab={s['vocab']} "
          f"{s['tensors']} tensors {s['params']} params in {len(s['files'])} file(s)"
          f"{' + index' if s['index'] else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
