"""The tiny hand-written LiteRT-LM packages (tools/make_tiny_litertlm.py), built once per
(checkpoint, tool source) under LUMEN_WORK_DIR and shared by the litert-weights tests."""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from conftest import TOOLS, _locked, model_dir, shared_dir, work_dir

import make_tiny_litertlm as mtl  # noqa: E402

PRESET = "tiny-mixed"


def tiny_packages() -> Path:
    ckpt = model_dir(PRESET, dtype="float32")
    stamp = hashlib.sha256((TOOLS / "make_tiny_litertlm.py").read_bytes() +
                           (ckpt / ".lumen-built").read_bytes()).hexdigest()[:16]
    root = work_dir() / "litert-weights"
    out = root / f"{PRESET}-{stamp}"
    with _locked(root / f".{PRESET}.lock"):
        if (out / ".built").exists():
            return out
        tmp = root / f".{PRESET}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        mtl.build(ckpt, tmp, shared_dir() / "manifests" / "litert-gemma-4-12b-it.json")
        (tmp / ".built").write_text(stamp)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    return out
