#!/usr/bin/env python3
"""Trains a tiny byte-level Gemma 4 on public-domain text, deterministically, on the CPU.

    train_tiny_gemma4.py --out DIR [--seed N] [--steps N] [--text-file FILE]
    train_tiny_gemma4.py --eval-ids N [--seed N]      # print the held-out evaluation ids

Why: the random tiny checkpoints of make_tiny_gemma4.py amplify any perturbation (bf16 rounding
alone flips 3-5% of their top-1 tokens, docs/kernels.md), so they cannot show whether a
quantized format keeps a model's predictions. A model that has learned something has decisive
next-token distributions, like a real one, at a size the tests can build in seconds.

The model is a real `Gemma4ForCausalLM` (transformers) with the tiny-mixed layer pattern of
make_tiny_gemma4.py (sliding, sliding, full, twice; k == v on full layers) at hidden 128 so the
int8 kernels' 128-column chunks are full, and a byte vocabulary: id = byte + 4 (ids 0..3 are
pad, eos, bos and one unused), 260 ids in all. It is trained with Adam, in f32, one thread,
from a fixed seed, on the King James Bible text of Debian's bible-kjv (public domain; the
`bible` program prints it), Genesis to Deuteronomy; evaluation text comes from Matthew, which
training never sees. Same seed, steps, torch version and text -> the same weights bit for bit
(one thread, deterministic kernels).

The checkpoint is written as f32 safetensors with config.json, like make_tiny_gemma4.py's, so
`lumen` loads it directly (and, with --quant, quantizes it at load).

Python is used here for tests and tools only; the engine never imports this.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_tiny_gemma4 as mk  # noqa: E402

BYTE_OFFSET = 4            # id = byte + 4; 0 pad, 1 eos, 2 bos, 3 unused
VOCAB = 256 + BYTE_OFFSET
BOS = 2
TRAIN_RANGE = "gen1:1-deu34:12"   # the Pentateuch, ~0.9 MB of text
EVAL_RANGE = "mat1:1-mat5:48"     # held out

CONFIG = dict(
    mk.preset_config_dict("tiny-mixed"),
    vocab_size=VOCAB, vocab_size_per_layer_input=VOCAB,
    hidden_size=128, intermediate_size=256,
    num_attention_heads=4, num_key_value_heads=2, head_dim=32,
    global_head_dim=64, num_global_key_value_heads=1,
    sliding_window=32, max_position_embeddings=1024,
)

DEFAULTS = dict(steps=150, batch=8, seq=128, lr=3e-3, warmup=20)


def bible_text(verses: str) -> str:
    """The KJV text of a verse range, verse numbers and chapter headings dropped, one line."""
    exe = shutil.which("bible")
    if not exe:
        raise SystemExit("train_tiny_gemma4: the `bible` program is missing "
                         "(Debian package bible-kjv; scripts/setup --test installs it)")
    out = subprocess.run([exe, verses], capture_output=True, text=True, check=True).stdout
    words = []
    for line in out.splitlines():
        s = line.strip()
        if not s or (s.split()[0][0].isalpha() and s.split()[-1].isdigit() and len(s.split()) <= 3):
            continue  # blank line or a heading such as "Genesis 1" / "1 Kings 3"
        parts = s.split()
        if parts[0].isdigit():
            parts = parts[1:]  # verse number
        words.extend(parts)
    text = " ".join(words)
    if len(text) < 1000:
        raise SystemExit(f"train_tiny_gemma4: `bible {verses}` printed only {len(text)} characters")
    return text


def encode(text: str) -> list[int]:
    return [b + BYTE_OFFSET for b in text.encode("utf-8")]


def eval_ids(n: int) -> list[int]:
    """BOS, then the first n - 1 bytes of the held-out text."""
    return [BOS] + encode(bible_text(EVAL_RANGE))[: n - 1]


def train(out_dir, seed: int = 0, steps: int = DEFAULTS["steps"], text: str | None = None,
          log=print) -> dict:
    import torch
    import transformers
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)

    data = torch.tensor(encode(text if text is not None else bible_text(TRAIN_RANGE)), dtype=torch.long)
    cfg = Gemma4TextConfig(**copy.deepcopy(CONFIG))
    model = Gemma4ForCausalLM(cfg)
    model.train()
    # Plain starting point: transformers' init, then unit gains; the tied embedding at unit
    # size in the residual (it is multiplied by sqrt(hidden)).
    with torch.no_grad():
        model.model.embed_tokens.weight.normal_(0.0, 1.0 / math.sqrt(cfg.hidden_size))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=DEFAULTS["lr"], betas=(0.9, 0.95), weight_decay=0.0)
    batch, seq = DEFAULTS["batch"], DEFAULTS["seq"]
    gen = torch.Generator().manual_seed(seed)
    t0, cpu0 = time.time(), time.process_time()
    losses = []
    for step in range(steps):
        lr = DEFAULTS["lr"] * min(1.0, (step + 1) / DEFAULTS["warmup"]) * \
            0.5 * (1 + math.cos(math.pi * step / steps))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(data) - seq, (batch,), generator=gen)
        x = torch.stack([torch.cat([torch.tensor([BOS]), data[s:s + seq - 1]]) for s in starts.tolist()])
        y = torch.stack([data[s:s + seq] for s in starts.tolist()])
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if step % 50 == 0 or step == steps - 1:
            log(f"step {step:4d}  loss {losses[-1]:.3f} nats/byte  lr {lr:.2e}  {time.time() - t0:.1f} s")

    model.eval()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("model*.safetensors")) + [out / "config.json", out / "generation_config.json"]:
        if old.exists():
            old.unlink()
    model.save_pretrained(str(out), safe_serialization=True)
    cfg_path = out / "config.json"
    cfg_json = json.loads(cfg_path.read_text())
    cfg_json["global_head_dim"] = CONFIG["global_head_dim"]
    cfg_json["num_global_key_value_heads"] = CONFIG["num_global_key_value_heads"]
    cfg_json.setdefault("dtype", "float32")
    cfg_path.write_text(json.dumps(cfg_json, indent=2, sort_keys=True) + "\n")
    gen_cfg = out / "generation_config.json"
    if gen_cfg.exists():
        gen_cfg.unlink()

    with torch.no_grad():
        ev = torch.tensor([eval_ids(257)])
        eval_loss = float(torch.nn.functional.cross_entropy(model(input_ids=ev[:, :-1]).logits[0], ev[0, 1:]))
    summary = dict(out=str(out), seed=seed, steps=steps, final_train_loss=sum(losses[-20:]) / min(20, len(losses)),
                   eval_loss_nats_per_byte=eval_loss, wall_s=time.time() - t0, cpu_s=time.process_time() - cpu0,
                   params=sum(p.numel() for p in model.parameters()),
                   torch=torch.__version__, transformers=transformers.__version__)
    (out / "training.json").write_text(
        json.dumps({k: v for k, v in summary.items() if k != "out"}, indent=2, sort_keys=True) + "\n")
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=DEFAULTS["steps"])
    ap.add_argument("--text-file", help="train on this UTF-8 file instead of the KJV Pentateuch")
    ap.add_argument("--eval-ids", type=int, metavar="N", help="print N held-out evaluation ids and exit")
    a = ap.parse_args(argv)
    if a.eval_ids:
        print(",".join(str(i) for i in eval_ids(a.eval_ids)))
        return 0
    if not a.out:
        ap.error("--out is required (or --eval-ids)")
    text = Path(a.text_file).read_text(encoding="utf-8") if a.text_file else None
    s = train(a.out, seed=a.seed, steps=a.steps, text=text)
    print(json.dumps(s, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
