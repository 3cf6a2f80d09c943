"""The real Gemma 4 vocabulary and chat template, for tests (not on the run path).

llama.cpp keeps, for its own tests, a vocabulary-only GGUF of Gemma 4 (262144 tokens, merges,
special tokens, tokenizer.chat_template) and Google's Gemma 4 chat templates. The PyPI sdist of
llama-cpp-python vendors both; this script fetches that sdist once with pip (pinned, SHA-256
checked) and extracts the two files under .cache/gemma4-tokenizer/:

  ggml-vocab-gemma-4.gguf          the vocabulary (Lumen reads it as a tokenizer)
  google-gemma-4-31B-it.jinja      the chat template (tools, tool calls, role "tool" messages)

    python tools/gemma4_tokenizer.py        # prints the folder
"""
from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / ".cache" / "gemma4-tokenizer"
SDIST = "llama-cpp-python==0.3.36"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
PREFIX = "llama_cpp_python-0.3.36/vendor/llama.cpp/models/"
CACHED_SDIST = REPO / ".cache" / "sdist" / "llama_cpp_python-0.3.36.tar.gz"
FILES = {
    "ggml-vocab-gemma-4.gguf": ("ggml-vocab-gemma-4.gguf",
                                "58b1ba0b57f3b4d7c468ba4ffd91ad85190346a3d7ad7e71d1cabaae8a14bb65"),
    "google-gemma-4-31B-it.jinja": ("templates/google-gemma-4-31B-it.jinja",
                                    "85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98"),
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ready() -> bool:
    return all((OUT / name).is_file() and sha256(OUT / name) == digest for name, (_, digest) in FILES.items())


def ensure() -> Path:
    if ready():
        return OUT
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        # scripts/setup keeps this sdist in .cache/sdist (a download and pip's metadata step,
        # ~40 CPU-seconds, saved on a fresh machine); otherwise pip fetches it here.
        archive = CACHED_SDIST
        if not archive.is_file() or sha256(archive) != SDIST_SHA256:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                            "--disable-pip-version-check", "-d", tmp, SDIST], check=True)
            archive = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        if sha256(archive) != SDIST_SHA256:
            raise SystemExit(f"{archive.name}: unexpected SHA-256")
        with tarfile.open(archive) as tar:
            for name, (member, digest) in FILES.items():
                data = tar.extractfile(PREFIX + member).read()
                if hashlib.sha256(data).hexdigest() != digest:
                    raise SystemExit(f"{member}: unexpected SHA-256")
                part = OUT / (name + ".partial")
                part.write_bytes(data)
                part.replace(OUT / name)
    return OUT


if __name__ == "__main__":
    print(ensure())
