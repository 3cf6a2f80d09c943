#!/usr/bin/env python3
"""Golden reference for Gemma 4 text checkpoints: transformers, float32, eager attention.

    reference_gemma4.py logits -m DIR --tokens 2,105,9 --out F.npy
        float32 logits [T, V] for every position: one forward over the whole sequence, no cache.
    reference_gemma4.py greedy -m DIR --tokens 2,105,9 -n 32
        the greedy continuation as a JSON array on one line: exactly N tokens (no EOS stopping),
        from model.generate (do_sample=False, KV cache), cross-checked against a plain
        no-cache argmax loop.

The checkpoint is loaded with from_pretrained(dir, dtype=torch.float32, attn_implementation="eager"):
bf16 weights are widened exactly, and every operation runs in f32. Note what that implies: the
embedding scale is sqrt(hidden) in f32 (transformers casts it to the weight dtype, here f32),
not the bf16-rounded value a bf16 run would use.

Importable: load(dir), logits(model_or_dir, tokens), greedy(model_or_dir, tokens, n),
greedy_nocache(model_or_dir, tokens, n) -> (ids, margins).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402

_CACHE: dict = {}


def _torch():
    import torch

    torch.set_num_threads(1)  # tiny models: threads only add contention
    return torch


def load(model_dir):
    """Load a checkpoint dir (text-only Gemma4ForCausalLM or the gemma4 wrapper) in float32."""
    torch = _torch()
    import transformers

    transformers.utils.logging.disable_progress_bar()
    d = Path(model_dir).resolve()
    stamp = tuple(sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in d.iterdir()))
    key = (str(d), stamp)
    if key in _CACHE:
        return _CACHE[key]
    cfg = json.loads((d / "config.json").read_text())
    mt = cfg.get("model_type")
    if mt == "gemma4_text":
        cls = transformers.Gemma4ForCausalLM
    elif mt == "gemma4":
        cls = transformers.Gemma4ForConditionalGeneration
    else:
        raise ValueError(f"reference_gemma4: {d}: unsupported model_type {mt!r}")
    model = cls.from_pretrained(str(d), dtype=torch.float32, attn_implementation="eager")
    model.eval()
    tc = _text_config(model)
    if tc.num_kv_shared_layers and not tc.hidden_size_per_layer_input:
        # transformers' Gemma4TextModel._maybe_slice_kv_shared_inputs (a speed-up that skips the
        # KV-shared layers for rows whose logits are not kept) indexes per_layer_inputs even when
        # the model has none, and fails on a KV-sharing model without per-layer inputs. Asking
        # for hidden states turns the speed-up off; it changes no value the test compares.
        tc.output_hidden_states = True
    _check_loaded(model, d)
    _CACHE.clear()
    _CACHE[key] = model
    return model


def _check_loaded(model, d: Path):
    """Every stored tensor must have reached the model unchanged (no silent re-init)."""
    torch = _torch()
    from safetensors import safe_open

    sd = model.state_dict()
    seen = 0
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as fh:
            for k in fh.keys():
                if k not in sd:
                    raise RuntimeError(f"reference_gemma4: {f.name}: tensor {k} not used by the model")
                if not torch.equal(fh.get_tensor(k).to(torch.float32), sd[k]):
                    raise RuntimeError(f"reference_gemma4: {f.name}: tensor {k} differs after loading")
                seen += 1
    expected = [k for k in sd if not k.endswith("lm_head.weight")]
    if seen != len(expected):
        raise RuntimeError(f"reference_gemma4: {d}: {seen} stored tensors, model has {len(expected)}")


def _model(m):
    return load(m) if isinstance(m, (str, os.PathLike)) else m


def _text_config(model):
    c = model.config
    return c.get_text_config() if hasattr(c, "get_text_config") else c


def logits(model_or_dir, tokens) -> np.ndarray:
    """float32 [T, V] logits (after the final softcap, if any), one no-cache forward."""
    torch = _torch()
    model = _model(model_or_dir)
    ids = torch.tensor([list(map(int, tokens))], dtype=torch.long)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False)
    return out.logits[0].to(torch.float32).numpy().copy()


def greedy_nocache(model_or_dir, tokens, n: int):
    """Plain argmax loop, full recompute each step. Returns (ids, top1-top2 margins)."""
    torch = _torch()
    model = _model(model_or_dir)
    seq = list(map(int, tokens))
    ids, margins = [], []
    with torch.no_grad():
        for _ in range(n):
            lg = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].to(torch.float32)
            top = torch.topk(lg, 2)
            nxt = int(top.indices[0])
            ids.append(nxt)
            margins.append(float(top.values[0] - top.values[1]))
            seq.append(nxt)
    return ids, margins


def greedy(model_or_dir, tokens, n: int, check: bool = True):
    """Exactly n greedy tokens from model.generate (KV cache, no EOS stop)."""
    torch = _torch()
    from transformers import GenerationConfig

    model = _model(model_or_dir)
    tc = _text_config(model)
    gc = GenerationConfig(do_sample=False, max_new_tokens=int(n), min_new_tokens=0,
                          eos_token_id=None, pad_token_id=tc.pad_token_id if tc.pad_token_id is not None else 0,
                          bos_token_id=tc.bos_token_id, use_cache=True, num_beams=1)
    inp = torch.tensor([list(map(int, tokens))], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(input_ids=inp, attention_mask=torch.ones_like(inp), generation_config=gc)
    ids = [int(x) for x in out[0, inp.shape[1]:]]
    if len(ids) != n:
        raise RuntimeError(f"reference_gemma4: generate produced {len(ids)} tokens, wanted {n}")
    if check:
        ref, margins = greedy_nocache(model, tokens, n)
        if ref != ids:
            # a divergence is only acceptable at a numerical near-tie
            k = next(i for i, (a, b) in enumerate(zip(ref, ids)) if a != b)
            if margins[k] > 1e-4:
                raise RuntimeError(f"reference_gemma4: cached generate and no-cache argmax disagree at step {k}: "
                                   f"{ids} vs {ref} (margin {margins[k]:.3g})")
    return ids


def _parse_tokens(s: str):
    try:
        return [int(x) for x in s.replace(" ", "").split(",") if x != ""]
    except ValueError:
        raise SystemExit(f"reference_gemma4: bad --tokens {s!r}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="transformers golden reference for Gemma 4 checkpoints")
    sub = ap.add_subparsers(dest="cmd", required=True)
    pl = sub.add_parser("logits")
    pl.add_argument("-m", "--model", required=True)
    pl.add_argument("--tokens", required=True)
    pl.add_argument("--out", required=True)
    pg = sub.add_parser("greedy")
    pg.add_argument("-m", "--model", required=True)
    pg.add_argument("--tokens", required=True)
    pg.add_argument("-n", type=int, required=True)
    pg.add_argument("--no-check", action="store_true", help="skip the no-cache cross-check")
    a = ap.parse_args(argv)
    toks = _parse_tokens(a.tokens)
    if a.cmd == "logits":
        arr = logits(a.model, toks)
        np.save(a.out, arr)
        print(f"{a.out}: float32 {list(arr.shape)}", file=sys.stderr)
    else:
        print(json.dumps(greedy(a.model, toks, a.n, check=not a.no_check)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
