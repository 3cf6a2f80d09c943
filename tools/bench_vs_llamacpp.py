#!/usr/bin/env python3
"""Prefill and decode speed of Lumen and llama.cpp (llama-cpp-python) on the same GGUF file.

    bench_vs_llamacpp.py MODEL.gguf [--lumen build/lumen] [-p 512] [-n 128] [--threads 2]
                         [--limits machine.json] [--flash-attn on|off|both] [--repeats 1] [--json]

Both sides measure what llama-bench calls pp512 and tg128, with the same thread count:
  - prefill (pp): one batched evaluation of a P-token prompt (BOS then seeded random ids) into an
    empty cache, logits of the last row only; tokens/s = P / seconds;
  - decode (tg): after one untimed token, N tokens evaluated one at a time, each appended to the
    cache (the ids do not change the cost); tokens/s = N / seconds.
Lumen runs `lumen bench -m MODEL -p P -n N --json` (its own process, the fast path unless
--exact is given) and reports its roofline fractions; llama.cpp runs in this process with
n_threads = n_threads_batch = THREADS, n_batch = n_ubatch = P, mmap on, one warm-up prefill, and
flash attention off, on or both (llama-bench's -fa). The ratio printed is Lumen / llama.cpp
(> 1: Lumen is faster). Timings are noise on a busy machine: run it on a quiet one.

A benchmark measures; no test asserts its figures (tests/parity only smoke-tests this script).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def lumen_bench(lumen: str, model: str, p: int, n: int, limits: str | None, exact: bool) -> dict:
    cmd = [lumen, "bench", "-m", model, "-p", str(p), "-n", str(n), "--json"]
    if limits:
        cmd += ["--limits", limits]
    if exact:
        cmd.append("--exact")
    cp = subprocess.run(cmd, capture_output=True, text=True)
    if cp.returncode != 0:
        raise SystemExit(f"bench_vs_llamacpp: {' '.join(cmd)} failed:\n{cp.stderr.strip()}")
    return json.loads(cp.stdout)


def prompt_ids(n_vocab: int, p: int, seed: int = 1) -> list[int]:
    rng = np.random.default_rng(seed)
    return [2] + [int(x) for x in rng.integers(4, n_vocab, size=p - 1)]


def llama_bench(model: str, p: int, n: int, threads: int, flash_attn: bool, repeats: int) -> dict:
    import llama_cpp

    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=model, n_ctx=p + n + 8, n_batch=p, n_ubatch=p, n_threads=threads,
                          n_threads_batch=threads, flash_attn=flash_attn, logits_all=False, verbose=False)
    load_s = time.perf_counter() - t0
    ids = prompt_ids(llm.n_vocab(), p)
    llm.reset()
    llm.eval(ids[: min(p, 32)])  # warm-up (llama-bench runs one too)
    pp, tg = [], []
    for _ in range(repeats):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        pp.append(p / (time.perf_counter() - t0))
        llm.reset()
        llm.eval([2])
        t0 = time.perf_counter()
        for i in range(n):
            llm.eval([ids[1 + i % (p - 1)]])
        tg.append(n / (time.perf_counter() - t0))
    return {"prefill_tokens_per_s": float(np.median(pp)), "decode_tokens_per_s": float(np.median(tg)),
            "load_s": load_s, "flash_attn": flash_attn, "threads": threads,
            "llama_cpp_python": llama_cpp.__version__}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--lumen", default=os.environ.get("LUMEN_BIN", str(REPO / "build" / "lumen")))
    ap.add_argument("-p", "--prompt", type=int, default=512)
    ap.add_argument("-n", "--gen", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limits", default=None, help="`lumen bench --machine --json` output (else measured)")
    ap.add_argument("--flash-attn", default="both", choices=["on", "off", "both"])
    ap.add_argument("--repeats", type=int, default=1, help="llama.cpp runs (the median is reported)")
    ap.add_argument("--exact", action="store_true", help="Lumen's exact f32 path instead of its fast path")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.prompt < 2 or a.gen < 1:
        ap.error("-p must be at least 2 and -n at least 1")

    lumen = lumen_bench(a.lumen, a.model, a.prompt, a.gen, a.limits, a.exact)
    if lumen.get("threads") != a.threads:
        print(f"note: lumen ran {lumen.get('threads')} threads (its pool: the machine's cores), llama.cpp {a.threads}",
              file=sys.stderr)
    modes = {"off": [False], "on": [True], "both": [False, True]}[a.flash_attn]
    llama = [llama_bench(a.model, a.prompt, a.gen, a.threads, fa, a.repeats) for fa in modes]
    best_pp = max(r["prefill_tokens_per_s"] for r in llama)
    best_tg = max(r["decode_tokens_per_s"] for r in llama)
    result = {
        "model": a.model, "prompt": a.prompt, "gen": a.gen,
        "lumen": {"prefill_tokens_per_s": lumen["prefill"]["tokens_per_s"],
                  "decode_tokens_per_s": lumen["decode"]["tokens_per_s"],
                  "prefill_fraction_of_int8_peak": lumen["prefill"]["fraction_of_int8_peak"],
                  "decode_fraction_of_bandwidth_roofline": lumen["decode"]["fraction_of_bandwidth_roofline"],
                  "threads": lumen["threads"], "isa": lumen["isa"], "load_s": lumen["load_s"],
                  "exact": a.exact},
        "llama_cpp": llama,
        "ratio_prefill": lumen["prefill"]["tokens_per_s"] / best_pp,
        "ratio_decode": lumen["decode"]["tokens_per_s"] / best_tg,
    }
    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    L = result["lumen"]
    print(f"model {a.model}")
    print(f"{'':22s} {'pp' + str(a.prompt):>12s} {'tg' + str(a.gen):>12s}   (tokens/s, {a.threads} threads)")
    print(f"{'lumen' + (' --exact' if a.exact else ''):22s} {L['prefill_tokens_per_s']:12.2f} {L['decode_tokens_per_s']:12.2f}"
          f"   ({100 * L['prefill_fraction_of_int8_peak']:.1f}% of int8 peak, "
          f"{100 * L['decode_fraction_of_bandwidth_roofline']:.1f}% of bandwidth roofline)")
    for r in llama:
        name = f"llama.cpp fa={'on' if r['flash_attn'] else 'off'}"
        print(f"{name:22s} {r['prefill_tokens_per_s']:12.2f} {r['decode_tokens_per_s']:12.2f}")
    print(f"{'lumen / llama.cpp':22s} {result['ratio_prefill']:11.2f}x {result['ratio_decode']:11.2f}x"
          f"   (against llama.cpp's better mode)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
