"""Cost of constrained decoding: decode tokens/s of `lumen serve` with and without a JSON Schema.

Runs the same chat requests (fixed seed, fixed max_tokens, one at a time) twice against the
default model: free text, then held to a JSON Schema whose outputs are long enough to fill the
budget. Prints tokens/s of each and the extra time per token the constraint costs
(1/tps_schema - 1/tps_free), and from the server's /metrics the time computing each token's
mask (mask_ms_per_token, beside the forward step) and the part the step waited for it
(mask_wait_ms_per_token: the cost the overlap did not hide). A benchmark, not a test: run it on a quiet machine.

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


def metrics(base) -> dict[str, float]:
    with urllib.request.urlopen(base.rsplit("/v1", 1)[0] + "/metrics", timeout=60) as r:
        out = {}
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                try:
                    out[name] = float(value)
                except ValueError:
                    pass
        return out


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
        m0 = metrics(base)
        constrained, n_con = run(base, a.requests, a.tokens, True)
        m1 = metrics(base)
        masks = m1["lumen_grammar_masks_total"] - m0["lumen_grammar_masks_total"]
        mask_s = m1["lumen_grammar_mask_seconds_total"] - m0["lumen_grammar_mask_seconds_total"]
        wait_s = m1["lumen_grammar_mask_wait_seconds_total"] - m0["lumen_grammar_mask_wait_seconds_total"]
        print(json.dumps({"free_tokens_per_s": round(free, 2), "schema_tokens_per_s": round(constrained, 2),
                          "slowdown_percent": round(100 * (1 - constrained / free), 2),
                          "extra_ms_per_token": round(1000 * (1 / constrained - 1 / free), 3),
                          "tokens": [n_free, n_con], "masks": int(masks),
                          "mask_ms_per_token": round(1000 * mask_s / max(masks, 1), 3),
                          "mask_wait_ms_per_token": round(1000 * wait_s / max(masks, 1), 3)}, indent=2))
    finally:
        proc.terminate()
        proc.wait(15)


if __name__ == "__main__":
    main()
