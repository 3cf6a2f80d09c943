"""Cost of constrained decoding: decode tokens/s of `lumen serve` with and without a JSON Schema.

Runs the same chat requests (fixed seed, fixed max_tokens, one at a time) twice against the
default model: free text, then held to a JSON Schema whose outputs are long enough to fill the
budget. Prints tokens/s of each and the extra time per token the constraint costs
(1/tps_schema - 1/tps_free), which is the mask time per token left over after the overlap
with the forward step. A benchmark, not a test: run it on a quiet machine.

    .venv/bin/python tools/bench_constraints.py --lumen build/lumen [--requests 8] [--tokens 64]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import time
import urllib.request

SCHEMA = {"type": "object", "properties": {
    "items": {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "count": {"type": "integer"}, "ok": {"type": "boolean"}},
        "required": ["name", "count", "ok"], "additionalProperties": False}}},
    "required": ["items"], "additionalProperties": False}


def post(base, body):
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def run(base, n, tokens, schema):
    total_tokens, total_s = 0, 0.0
    for i in range(n):
        body = {"messages": [{"role": "user", "content": f"List some things ({i})."}], "max_tokens": tokens,
                "temperature": 1.0, "seed": i}
        if schema:
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}
        t0 = time.perf_counter()
        out = post(base, body)
        total_s += time.perf_counter() - t0
        total_tokens += out["usage"]["completion_tokens"]
    return total_tokens / total_s, total_tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lumen", default="build/lumen")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args()
    proc = subprocess.Popen([a.lumen, "serve", "--port", "0", "--parallel", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            m = re.match(r"^lumen: serving \S+ on (http://\S+) ", line)
            if m:
                base = m.group(1)
                break
        run(base, 1, 8, True)  # warm-up: the vocabulary trie and the grammar's first contexts
        free, n_free = run(base, a.requests, a.tokens, False)
        constrained, n_con = run(base, a.requests, a.tokens, True)
        print(json.dumps({"free_tokens_per_s": round(free, 2), "schema_tokens_per_s": round(constrained, 2),
                          "slowdown_percent": round(100 * (1 - constrained / free), 2),
                          "extra_ms_per_token": round(1000 * (1 / constrained - 1 / free), 3),
                          "tokens": [n_free, n_con]}, indent=2))
    finally:
        proc.terminate()
        proc.wait(15)


if __name__ == "__main__":
    main()
