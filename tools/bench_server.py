#!/usr/bin/env python3
"""Aggregate generation throughput of `lumen serve` with 1, 2, 4, 8 concurrent streams.

Starts the server on 127.0.0.1 (a free port), then for each concurrency level runs that many
streaming chat requests at once, each generating exactly --tokens tokens (stop tokens banned with
logit_bias so every stream is the same length), and reports aggregate completion tokens per
second of wall time and the server's own decode/prefill rates. A measurement, not a test.

  tools/bench_server.py --lumen build/lumen -m MODEL_DIR [--tokens 64] [--levels 1,2,4,8]
"""
from __future__ import annotations

import argparse
import http.client
import json
import re
import signal
import subprocess
import sys
import threading
import time

TEMPERATURE = 0.8
BANNER = re.compile(r"^lumen: serving (\S+) on http://127\.0\.0\.1:(\d+) ")


def stream_once(port: int, tokens: int, seed: int, ban: dict) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    body = {"messages": [{"role": "user", "content": f"Tell story number {seed}."}], "stream": True,
            "max_tokens": tokens, "temperature": TEMPERATURE, "seed": seed, "logit_bias": ban,
            "stream_options": {"include_usage": True}}
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    used = 0
    for raw in resp:
        line = raw.decode().strip()
        if line.startswith("data: {"):
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                used = chunk["usage"]["completion_tokens"]
    conn.close()
    return used


def metrics(port: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return {k: float(v) for k, v in (l.rsplit(" ", 1) for l in text.splitlines() if l and not l.startswith("#"))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lumen", default="build/lumen")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--tokens", type=int, default=64, help="tokens per stream")
    ap.add_argument("--levels", default="1,2,4,8")
    ap.add_argument("--ban", default="1,106", help="token ids banned so streams run to --tokens (eos, end of turn)")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    global TEMPERATURE
    TEMPERATURE = args.temperature
    ban = {str(int(t)): -100 for t in args.ban.split(",") if t}

    proc = subprocess.Popen([args.lumen, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", "0",
                             "--parallel", str(max(levels)), "--queue", str(max(levels))],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        port = None
        for line in proc.stdout:
            m = BANNER.match(line)
            if m:
                port = int(m.group(2))
                break
        if port is None:
            print("lumen serve did not start", file=sys.stderr)
            return 1
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
        stream_once(port, 8, 0, ban)  # warm-up
        results = []
        for n in levels:
            before = metrics(port)
            counts = [0] * n
            errors = []

            def run(i):
                try:
                    counts[i] = stream_once(port, args.tokens, 1000 * n + i, ban)
                except Exception as e:  # noqa: BLE001
                    errors.append(str(e))

            threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            after = metrics(port)
            dec_t = after["lumen_decode_seconds_total"] - before["lumen_decode_seconds_total"]
            dec_n = after["lumen_decode_tokens_total"] - before["lumen_decode_tokens_total"]
            steps = after["lumen_scheduler_steps_total"] - before["lumen_scheduler_steps_total"]
            r = {"streams": n, "tokens": sum(counts), "wall_s": round(wall, 3),
                 "aggregate_tok_s": round(sum(counts) / wall, 1),
                 "per_stream_tok_s": round(sum(counts) / wall / n, 1),
                 "decode_tok_s_server": round(dec_n / dec_t, 1) if dec_t > 0 else 0.0,
                 "rows_per_step": round((dec_n + after["lumen_prefill_tokens_total"] - before["lumen_prefill_tokens_total"]) / steps, 2) if steps else 0,
                 "errors": errors}
            results.append(r)
            if not args.json:
                print(f"{n} streams: {r['tokens']} tokens in {r['wall_s']} s = {r['aggregate_tok_s']} tok/s aggregate "
                      f"({r['per_stream_tok_s']} per stream; server decode {r['decode_tok_s_server']} tok/s; "
                      f"{r['rows_per_step']} rows/step){' ERRORS ' + str(errors) if errors else ''}", flush=True)
        if args.json:
            print(json.dumps(results, indent=2))
        return 0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    sys.exit(main())
