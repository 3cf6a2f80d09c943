"""Cached tiny Gemma 4 GGUF files for the gemma4 GGUF tests.

A tiny checkpoint made by transformers (tools/make_tiny_gemma4.py, cached by conftest.model_dir)
gets a tiny Gemma 4 tokenizer (tools/gemma4_gguf.py tokenizer) in a folder of its own; that
folder is converted as llama.cpp's converter does (tools/gemma4_gguf.py convert: F32, F16, BF16,
Q8_0) and quantized by llama.cpp's own quantizer (llama-cpp-python's llama_model_quantize) from
the F32 file. `dequantized_dir` is the f32 checkpoint of exactly a GGUF's numbers, which
transformers runs as the reference. Everything lives under LUMEN_WORK_DIR/gemma4_gguf, keyed by
the sources of both tools and the library versions.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
from pathlib import Path

from conftest import TOOLS, _locked, describe, lumen_bin, model_dir, run_lumen, work_dir  # noqa: F401  (TOOLS: for the tests)

import gemma4_gguf as g4  # noqa: E402

logging.getLogger("gguf").setLevel(logging.ERROR)  # the converter's "Duplicated key" notices

CONVERTER_TYPES = ["F32", "F16", "BF16", "Q8_0"]  # convert_hf_to_gguf.py --outtype
QUANTIZER_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S", "Q3_K_M", "Q4_K_S", "Q4_K_M",
                   "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS"]  # llama_model_quantize from F32
# `lumen quantize` from the same F32 file (named "lumen-TYPE"): the files Lumen writes, for llama.cpp to read.
LUMEN_QUANTIZE_TYPES = ["Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q4_0", "IQ4_XS"]


def _lumen_quantize(src: Path, dst: Path, qtype: str) -> None:
    out = dst.with_name(dst.name + ".gguf")
    cp = run_lumen("quantize", src, out, "--type", qtype)
    assert cp.returncode == 0, describe(cp)
    os.replace(out, dst)


def _stamp() -> str:
    import gguf
    import torch
    import transformers

    h = hashlib.sha256()
    for tool in ("gemma4_gguf.py", "make_tiny_gemma4.py"):
        h.update((TOOLS / tool).read_bytes())
    h.update(f"{torch.__version__} {transformers.__version__} {getattr(gguf, '__version__', '')}".encode())
    try:
        import llama_cpp

        h.update(llama_cpp.__version__.encode())
    except ImportError:
        pass
    return h.hexdigest()[:16]


def _lumen_identity(qtype: str) -> str:
    """For files `lumen quantize` made (and what is derived from them): the binary that made them."""
    if "lumen-" not in qtype:
        return ""
    st = Path(lumen_bin()).stat()
    return f" lumen {st.st_size} {st.st_mtime_ns}"


def _cached(path: Path, build, extra: str = "") -> Path:
    """path, built by build(tmp_path) once per stamp (a file or a folder)."""
    stamp_file = path.with_name(path.name + ".stamp")
    stamp = _stamp() + extra
    with _locked(path.with_name(f".{path.name}.lock")):
        if path.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
            return path
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        if tmp.exists():
            tmp.unlink()
        build(tmp)
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        os.replace(tmp, path)
        stamp_file.write_text(stamp)
    return path


def root() -> Path:
    d = work_dir() / "gemma4_gguf"
    d.mkdir(parents=True, exist_ok=True)
    return d


def hf_dir(preset: str = "tiny-k256", seed: int = 0, dtype: str = "float32") -> Path:
    """The checkpoint (links to the cached one) plus the tiny Gemma 4 tokenizer."""
    src = model_dir(preset, seed=seed, dtype=dtype)

    def build(tmp: Path):
        tmp.mkdir(parents=True)
        for f in list(src.glob("*.safetensors")) + [src / "config.json"]:
            (tmp / f.name).symlink_to(f.resolve())
        g4.write_tokenizer(tmp)

    suffix = "" if dtype == "float32" else f"-{dtype}"
    return _cached(root() / f"{preset}-s{seed}{suffix}-hf", build)


def gguf_file(qtype: str, preset: str = "tiny-k256", seed: int = 0) -> Path:
    """The tiny model as a GGUF of `qtype`: a converter output type, or a llama.cpp quantization
    (from the F32 file) when it is not one (Q8_0 is both: 'Q8_0' is the converter's,
    'Q8_0-quantize' llama.cpp's)."""
    if qtype in CONVERTER_TYPES:
        return _cached(root() / f"{preset}-s{seed}-{qtype}.gguf",
                       lambda tmp: g4.convert(hf_dir(preset, seed), tmp, qtype.lower()))
    f32 = gguf_file("F32", preset, seed)
    if qtype.startswith("lumen-"):
        return _cached(root() / f"{preset}-s{seed}-{qtype}.gguf",
                       lambda tmp: _lumen_quantize(f32, tmp, qtype.removeprefix("lumen-")), _lumen_identity(qtype))
    base = qtype.removesuffix("-quantize")
    return _cached(root() / f"{preset}-s{seed}-{qtype}.gguf", lambda tmp: g4.quantize(f32, tmp, base))


def dequantized_dir(qtype: str, preset: str = "tiny-k256", seed: int = 0) -> Path:
    """The f32 checkpoint of exactly the numbers of gguf_file(qtype), with the tokenizer."""
    path = gguf_file(qtype, preset, seed)

    def build(tmp: Path):
        g4.dequantize(path, hf_dir(preset, seed), tmp)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(hf_dir(preset, seed) / name, tmp / name)

    return _cached(root() / f"{preset}-s{seed}-{qtype}-dequantized", build, _lumen_identity(qtype))


def dequantized_gguf(qtype: str, preset: str = "tiny-k256", seed: int = 0) -> Path:
    """An F32 GGUF of exactly the numbers of gguf_file(qtype)."""
    return _cached(root() / f"{preset}-s{seed}-{qtype}-dequantized-F32.gguf",
                   lambda tmp: g4.convert(dequantized_dir(qtype, preset, seed), tmp, "f32"), _lumen_identity(qtype))


def have_llama_cpp() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


# ---------------------------------------------------------------------------- llama.cpp's own converter

def llama_cpp_pin() -> str | None:
    """The llama-cpp-python version tools/requirements-test.txt pins."""
    for line in (TOOLS / "requirements-test.txt").read_text().splitlines():
        name, _, version = line.partition("==")
        if name.strip().lower().replace("_", "-") == "llama-cpp-python":
            return version.strip()
    return None


def llama_cpp_converter() -> Path:
    """convert_hf_to_gguf.py of the pinned llama-cpp-python sdist (scripts/setup --test keeps it
    in .cache/sdist; the wheel has no converter), with its conversion/ package and gguf-py."""
    import tarfile

    import pytest

    version = llama_cpp_pin()
    if version is None:
        pytest.skip("llama-cpp-python is not pinned in tools/requirements-test.txt")
    sdist = TOOLS.parent / ".cache" / "sdist" / f"llama_cpp_python-{version}.tar.gz"
    assert sdist.is_file(), f"{sdist} is missing: run scripts/setup --test"
    top = f"llama_cpp_python-{version}/vendor/llama.cpp/"

    def build(tmp: Path):
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(top) and m.isfile() and (
                m.name == top + "convert_hf_to_gguf.py" or m.name.startswith(top + "conversion/")
                or m.name.startswith(top + "gguf-py/gguf/"))]
            tar.extractall(tmp, members=members, filter="data")

    return _cached(root() / f"llama-cpp-{version}-converter", build) / top / "convert_hf_to_gguf.py"


# Runs the converter's main() once per job in one interpreter (torch and the converter imported
# once): argv = converter, then (checkpoint, out, outtype) triples.
_CONVERT_DRIVER = """
import os, runpy, sys
conv, jobs = sys.argv[1], sys.argv[2:]
sys.argv = [conv]
sys.path.insert(0, os.path.dirname(conv))  # as a script run: its folder (conversion/) first
main = runpy.run_path(conv, run_name="llama_cpp_converter")["main"]
for i in range(0, len(jobs), 3):
    src, out, outtype = jobs[i:i + 3]
    sys.argv = [conv, src, "--outfile", out, "--outtype", outtype]
    main()
"""


def llama_cpp_gguf_path(preset: str, outtype: str = "f32", dtype: str = "bfloat16", seed: int = 0) -> Path:
    suffix = "" if dtype == "float32" else f"-{dtype}"
    return root() / f"{preset}-s{seed}{suffix}-llama-cpp-{outtype}.gguf"


def llama_cpp_ggufs(jobs, dtype: str = "bfloat16", seed: int = 0) -> dict:
    """(preset, outtype) -> the checkpoint of `preset` (made by transformers, with the tiny
    tokenizer) converted by llama.cpp's own convert_hf_to_gguf.py --outtype OUTTYPE; the missing
    ones in one run of the converter. Cached like every file here."""
    import subprocess
    import sys

    converter = llama_cpp_converter()
    stamp = _stamp() + " " + hashlib.sha256(converter.read_bytes()).hexdigest()[:16]
    out, todo = {}, []
    for preset, outtype in jobs:
        path = llama_cpp_gguf_path(preset, outtype, dtype, seed)
        out[(preset, outtype)] = path
        stamp_file = path.with_name(path.name + ".stamp")
        if not (path.exists() and stamp_file.exists() and stamp_file.read_text() == stamp):
            todo.append((hf_dir(preset, seed, dtype), path, outtype))
    if todo:
        with _locked(root() / ".llama-cpp-convert.lock"):
            args = []
            for src, path, outtype in todo:
                args += [str(src), str(path.with_name(f".{path.name}.tmp{os.getpid()}")), outtype]
            env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
            cp = subprocess.run([sys.executable, "-c", _CONVERT_DRIVER, str(converter), *args], capture_output=True,
                                text=True, timeout=900, env=env)
            assert cp.returncode == 0, f"llama.cpp's converter failed:\n{cp.stderr[-3000:]}"
            for src, path, outtype in todo:
                os.replace(path.with_name(f".{path.name}.tmp{os.getpid()}"), path)
                path.with_name(path.name + ".stamp").write_text(stamp)
    return out


def dequantized_copy(src: Path) -> Path:
    """An F32 GGUF of exactly the numbers of `src` (every tensor dequantized by gguf-py), with
    its metadata; cached beside it."""
    return _cached(src.with_name(src.stem + "-dequantized-F32.gguf"), lambda tmp: g4.dequantize_gguf(src, tmp),
                   " " + hashlib.sha256(src.read_bytes()).hexdigest()[:16])
