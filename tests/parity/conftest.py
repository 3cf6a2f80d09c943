"""Shared fixtures of the parity tests: environment, cached tiny checkpoints, the reference, lumen runs.

Environment (CTest sets all three):
  LUMEN_BIN         the `lumen` binary. Unset: the tests that need it are skipped (the reference
                    sanity tests still run). Set but missing: those tests fail.
  LUMEN_SHARED_DIR  the project's shared/ folder (default: <repo>/../shared).
  LUMEN_WORK_DIR    scratch folder (default: a folder under the system temp dir). Checkpoints are
                    cached under models/, keyed by preset, seed, dtype, sharding and the builder's
                    source hash; figures go to parity_report.json.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

import make_tiny_gemma4 as mk  # noqa: E402
import reference_gemma4 as ref  # noqa: E402

LUMEN_TIMEOUT_S = 300
STOP_IDS = {1, 50, 106}  # eos, <|tool_response>, <turn|>: an engine may stop on them


def work_dir() -> Path:
    d = os.environ.get("LUMEN_WORK_DIR")
    p = Path(d) if d else Path(tempfile.gettempdir()) / "lumen-parity-work"
    p.mkdir(parents=True, exist_ok=True)
    return p


def shared_dir() -> Path:
    d = os.environ.get("LUMEN_SHARED_DIR")
    return Path(d) if d else REPO.parent / "shared"


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _builder_stamp() -> str:
    import torch
    import transformers

    h = hashlib.sha256()
    h.update((TOOLS / "make_tiny_gemma4.py").read_bytes())
    h.update(f"{torch.__version__} {transformers.__version__}".encode())
    return h.hexdigest()[:16]


def model_dir(preset: str, seed: int = 0, dtype: str = "bfloat16", shard_size=None,
              wrapper: bool = False) -> Path:
    """A cached checkpoint, built once per (preset, seed, dtype, shards, wrapper, builder source)."""
    name = f"{preset}-s{seed}-{dtype}"
    if shard_size is not None:
        name += f"-shard{mk.parse_size(shard_size)}"
    if wrapper:
        name += "-wrapper"
    root = work_dir() / "models"
    out = root / name
    stamp = _builder_stamp()
    with _locked(root / f".{name}.lock"):
        sf = out / ".lumen-built"
        if sf.exists() and sf.read_text() == stamp:
            return out
        tmp = root / f".{name}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        mk.build(preset, tmp, seed=seed, dtype=dtype, shard_size=shard_size, wrapper=wrapper)
        (tmp / ".lumen-built").write_text(stamp)
        shutil.rmtree(out, ignore_errors=True)
        os.replace(tmp, out)
    return out


def record(section: str, key: str, figures: dict) -> None:
    """Merge figures into LUMEN_WORK_DIR/parity_report.json (safe across processes)."""
    path = work_dir() / "parity_report.json"
    with _locked(work_dir() / ".parity_report.lock"):
        try:
            data = json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            data = {}
        data.setdefault(section, {})[key] = dict(figures, recorded_at=time.strftime("%Y-%m-%dT%H:%M:%S"))
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)


def token_sequence(vocab: int, length: int, seed: int) -> list[int]:
    """BOS then seeded random ids in [4, vocab)."""
    rng = np.random.default_rng(seed)
    return [2] + [int(x) for x in rng.integers(4, vocab, size=length - 1)]


def tokens_arg(tokens) -> str:
    return ",".join(str(int(t)) for t in tokens)


# ---------------------------------------------------------------------------- reference sanity

def reference_stats(logits: np.ndarray, softcap) -> dict:
    cap = softcap if softcap is not None else 30.0
    return dict(
        std=float(logits.std()),
        max_abs=float(np.abs(logits).max()),
        frac_near_cap=float(np.mean(np.abs(logits) > 0.9 * cap)),
        distinct_argmax=int(len(set(logits.argmax(-1).tolist()))),
        finite=bool(np.isfinite(logits).all()),
    )


def assert_reference_sane(logits: np.ndarray, softcap, what: str) -> dict:
    """A degenerate reference (saturated, flat, constant) must not let a broken engine pass."""
    s = reference_stats(logits, softcap)
    assert s["finite"], f"{what}: reference logits are not finite"
    assert 0.5 <= s["std"] <= 10.0, f"{what}: reference logit std {s['std']:.3f} outside [0.5, 10]"
    assert s["frac_near_cap"] < 0.01, f"{what}: {s['frac_near_cap']:.2%} of reference logits near +-{softcap}"
    t = logits.shape[0]
    assert s["distinct_argmax"] >= min(8, t // 4), \
        f"{what}: reference argmax takes only {s['distinct_argmax']} values over {t} positions"
    return s


def assert_greedy_sane(runs, what: str) -> None:
    """runs: greedy continuations of several prompts. A random model may fall into a repetition
    attractor on one prompt; a degenerate one does on all of them."""
    best = max(len(set(ids)) for ids in runs)
    assert best >= 8, f"{what}: every reference greedy continuation is degenerate: {runs}"


def greedy_case(mdir: Path, vocab: int, length: int, n: int, seed: int, min_margin: float = 5e-3,
                min_distinct: int = 4, tries: int = 40):
    """A prompt whose reference continuation is unambiguous and informative: every step's top-1/top-2
    logit margin is >= min_margin (far above the 1e-4 relative logits tolerance), no stop id is
    produced (so the engine's output is well defined whether or not it stops on EOS), and it is
    not stuck on one or two tokens (random models have repetition attractors). Deterministic in seed."""
    model = ref.load(mdir)
    for k in range(tries):
        toks = token_sequence(vocab, length, seed + 1000 * k)
        ids, margins = ref.greedy_nocache(model, toks, n)
        if min(margins) >= min_margin and not (set(ids) & STOP_IDS) and len(set(ids)) >= min_distinct:
            gen = ref.greedy(model, toks, n, check=False)
            assert gen == ids, f"reference: cached generate {gen} != no-cache argmax {ids}"
            return toks, ids, min(margins), seed + 1000 * k
    raise AssertionError(f"{mdir.name}: no prompt in {tries} tries with an unambiguous greedy continuation")


# ---------------------------------------------------------------------------- lumen

def lumen_bin() -> str:
    b = os.environ.get("LUMEN_BIN")
    if not b:
        pytest.skip("LUMEN_BIN is not set (CTest sets it); only the reference side can run")
    assert Path(b).is_file() and os.access(b, os.X_OK), f"LUMEN_BIN={b} is not an executable file"
    return b


def run_lumen(*args, timeout=LUMEN_TIMEOUT_S) -> subprocess.CompletedProcess:
    cmd = [lumen_bin(), *map(str, args)]
    start = time.monotonic()
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"lumen timed out after {timeout}s: {' '.join(cmd)}") from e
    finally:
        # LUMEN_TEST_TIMES=FILE: every lumen command's wall seconds, to see where a test's time goes.
        if os.environ.get("LUMEN_TEST_TIMES"):
            with open(os.environ["LUMEN_TEST_TIMES"], "a", encoding="utf-8") as log:
                log.write(f"{time.monotonic() - start:.2f}\t{' '.join(cmd[1:])}\n")


def describe(cp: subprocess.CompletedProcess) -> str:
    return (f"$ {' '.join(cp.args)}\nexit {cp.returncode}\n--- stdout (tail)\n{cp.stdout[-2000:]}"
            f"\n--- stderr (tail)\n{cp.stderr[-2000:]}")


@pytest.fixture(scope="session")
def shared():
    return shared_dir()


@pytest.fixture(scope="session")
def work():
    return work_dir()
