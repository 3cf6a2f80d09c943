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


def tiny_packages(preset: str = PRESET) -> Path:
    """The packages of a tiny checkpoint (float32): tiny-mixed by default; a per-layer-input preset
    (tiny-e2b, tiny-ple-kvshare) gets the E2B/E4B section layout."""
    ckpt = model_dir(preset, dtype="float32")
    stamp = hashlib.sha256((TOOLS / "make_tiny_litertlm.py").read_bytes() +
                           (ckpt / ".lumen-built").read_bytes()).hexdigest()[:16]
    root = work_dir() / "litert-weights"
    out = root / f"{preset}-{stamp}"
    with _locked(root / f".{preset}.lock"):
        if (out / ".built").exists():
            return out
        tmp = root / f".{preset}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        mtl.build(ckpt, tmp, shared_dir() / "manifests" / "litert-gemma-4-12b-it.json")
        (tmp / ".built").write_text(stamp)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    return out
