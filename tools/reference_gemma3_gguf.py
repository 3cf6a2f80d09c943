#!/usr/bin/env python3
"""Reference for GGUF Gemma 3 models: Hugging Face transformers loading the same .gguf file.

transformers' GGUF loader (needs the PyPI `gguf` and `accelerate` packages) dequantizes every
tensor to float32 with gguf-py (the same ggml block arithmetic Lumen uses) and subtracts the 1
llama.cpp's converter folded into the norm gains; the model then runs in float32 with eager
attention. Its tokenizer is built from the file's tokenizer.ggml.* metadata.

    reference_gemma3_gguf.py logits FILE --tokens 2,818,5279 --out F.npy
        float32 logits [T, V] of every position (one forward, no cache).
    reference_gemma3_gguf.py greedy FILE --tokens 2,105,2364 -n 64
        the greedy continuation (exactly N tokens, no EOS stop, KV cache) as a JSON array.
    reference_gemma3_gguf.py chat-tokens FILE "question" [...]
        the prompt ids of a one-user-turn Gemma 3 chat (the file has no chat template; the
        turn format is Gemma 3's: <bos><start_of_turn>user\\n...<end_of_turn>\\n<start_of_turn>model\\n).
    reference_gemma3_gguf.py perplexity FILE --text T.txt [--ctx 512] [--max-tokens N]
        perplexity as `lumen perplexity` defines it (see perplexity()), as JSON.

Importable: load(file), tokenizer(file), logits(model, ids), greedy(model, ids, n),
chat_prompt_ids(tok, question), perplexity(model, ids, ctx, bos).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402


def _torch():
    import torch

    # One thread: a 270M model gains little from more, and on a shared machine extra threads
    # spin against each other (measured 5x slower with 2 threads under load).
    torch.set_num_threads(1)
    return torch


def load(path):
    """The GGUF model in float32 with eager attention (transformers' own dequantization)."""
    torch = _torch()
    import transformers

    transformers.utils.logging.disable_progress_bar()
    p = Path(path).resolve()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(p.parent), gguf_file=p.name, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model


def tokenizer(path):
    import transformers

    p = Path(path).resolve()
    return transformers.AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)


def logits(model, ids) -> np.ndarray:
    torch = _torch()
    with torch.no_grad():
        out = model(torch.tensor([list(ids)]), use_cache=False)
    return out.logits[0].float().numpy()


def greedy(model, ids, n: int) -> list[int]:
    """Exactly n greedy tokens (argmax, lowest id on ties as torch.argmax), with a KV cache."""
    torch = _torch()
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    out_ids: list[int] = []
    with torch.no_grad():
        step = torch.tensor([list(ids)])
        pos = 0
        for _ in range(n):
            T = step.shape[1]
            out = model(step, past_key_values=cache, use_cache=True,
                        cache_position=torch.arange(pos, pos + T))
            pos += T
            nxt = int(torch.argmax(out.logits[0, -1]))
            out_ids.append(nxt)
            step = torch.tensor([[nxt]])
    return out_ids


def chat_prompt_text(question: str) -> str:
    return f"<bos><start_of_turn>user\n{question}<end_of_turn>\n<start_of_turn>model\n"


def chat_prompt_ids(tok, question: str) -> list[int]:
    return list(tok(chat_prompt_text(question), add_special_tokens=False).input_ids)


def perplexity(model, ids, ctx: int, bos: int) -> dict:
    """Chunks of ctx - 1 text tokens, each after a BOS; every token of a chunk is scored given
    the BOS and the chunk's earlier tokens. ppl = exp(mean negative log-likelihood)."""
    torch = _torch()
    nll = 0.0
    count = 0
    with torch.no_grad():
        for start in range(0, len(ids), ctx - 1):
            chunk = [bos] + list(ids[start:start + ctx - 1])
            out = model(torch.tensor([chunk]), use_cache=False).logits[0].double()
            logp = torch.log_softmax(out[:-1], dim=-1)
            target = torch.tensor(chunk[1:])
            nll -= float(logp[torch.arange(len(target)), target].sum())
            count += len(target)
    return {"tokens": count, "ctx": ctx, "nll": nll / count, "ppl": math.exp(nll / count)}


def _ids(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    lg = sub.add_parser("logits")
    lg.add_argument("file")
    lg.add_argument("--tokens", required=True)
    lg.add_argument("--out", required=True)
    gr = sub.add_parser("greedy")
    gr.add_argument("file")
    gr.add_argument("--tokens", required=True)
    gr.add_argument("-n", type=int, default=64)
    ct = sub.add_parser("chat-tokens")
    ct.add_argument("file")
    ct.add_argument("questions", nargs="+")
    pp = sub.add_parser("perplexity")
    pp.add_argument("file")
    pp.add_argument("--text", required=True)
    pp.add_argument("--ctx", type=int, default=512)
    pp.add_argument("--max-tokens", type=int, default=0, help="score only the first N text tokens")
    args = parser.parse_args(argv)

    if args.command == "chat-tokens":
        tok = tokenizer(args.file)
        for q in args.questions:
            print(",".join(map(str, chat_prompt_ids(tok, q))))
        return 0
    if args.command == "perplexity":
        tok = tokenizer(args.file)
        ids = tok(Path(args.text).read_text(encoding="utf-8"), add_special_tokens=False).input_ids
        if args.max_tokens:
            ids = ids[:args.max_tokens]
        result = perplexity(load(args.file), ids, args.ctx, tok.bos_token_id)
        result["text"] = args.text
        print(json.dumps(result))
        return 0
    model = load(args.file)
    if args.command == "logits":
        np.save(args.out, logits(model, _ids(args.tokens)))
    else:
        print(json.dumps(greedy(model, _ids(args.tokens), args.n)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
