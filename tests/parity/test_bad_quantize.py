"""Bad input to `lumen quantize`, `lumen imatrix` and `lumen perplexity --kl-divergence` is one
`lumen: error:` line naming the file, tensor, entry or flag at fault, a non-zero exit, and no
output file (nor temp file) left behind.

Models: tiny random Gemma 3 GGUFs (tools/make_tiny_gemma3_gguf.py) with F32 matrices, one of
them with a tensor removed; an imatrix made by `lumen imatrix` on a 4-layer model and offered
to a 6-layer one (and a 6-layer model of other shapes).
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import describe, run_lumen, work_dir

import make_tiny_gemma3_gguf as mk
from gguf import GGMLQuantizationType as Q


def f32_model(path: Path, layers: int = 6, mutate=None) -> Path:
    def all_f32(meta, table):
        for name, (array, _) in list(table.items()):
            table[name] = (array, Q.F32)
        if mutate:
            mutate(meta, table)

    mk.build(path, seed=3, layers=layers, mutate=all_f32)
    return path


@pytest.fixture(scope="module")
def d() -> Path:
    p = work_dir() / f"bad-quantize-{os.getpid()}"
    p.mkdir(parents=True, exist_ok=True)
    return p


def text_file(d: Path) -> Path:
    t = d / "calib.txt"
    t.write_text("In the beginning God created the heaven and the earth. " * 40)
    return t


def assert_one_line_error(cp, *needles) -> None:
    assert cp.returncode != 0, describe(cp)
    lines = [l for l in cp.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("lumen: error:"), describe(cp)
    for n in needles:
        assert str(n) in lines[0], f"{n!r} not in: {lines[0]}"


def assert_nothing_left(d: Path, name: str) -> None:
    left = [p.name for p in d.iterdir() if p.name.startswith(name)]
    assert not left, f"left behind: {left}"


def test_unknown_type(d):
    src = f32_model(d / "m.gguf")
    cp = run_lumen("quantize", src, d / "out-type.gguf", "--type", "Q3_X")
    assert_one_line_error(cp, "--type", "Q3_X", "Q4_K_M")
    assert_nothing_left(d, "out-type")
    cp = run_lumen("quantize", src, d / "out-tt.gguf", "--tensor-type", "attn_v=q9_9")
    assert_one_line_error(cp, "--tensor-type", "q9_9")
    assert_nothing_left(d, "out-tt")


def test_imatrix_of_another_model(d):
    small = f32_model(d / "small.gguf", layers=4)
    big = f32_model(d / "big.gguf", layers=6)
    imatrix = d / "small-imatrix.gguf"
    cp = run_lumen("imatrix", "-m", small, "-f", text_file(d), "-o", imatrix, "--ctx", 32, "--chunks", 2)
    assert cp.returncode == 0, describe(cp)
    # Its entries all exist in the 6-layer model, with the same shapes: that one is fine.
    ok = run_lumen("quantize", big, d / "out-ok.gguf", "--type", "Q8_0", "--imatrix", imatrix)
    assert ok.returncode == 0, describe(ok)
    # The other way round: entries for blocks 4 and 5 name no tensor of the 4-layer model.
    big_imatrix = d / "big-imatrix.gguf"
    cp = run_lumen("imatrix", "-m", big, "-f", text_file(d), "-o", big_imatrix, "--ctx", 32, "--chunks", 2)
    assert cp.returncode == 0, describe(cp)
    cp = run_lumen("quantize", small, d / "out-other.gguf", "--type", "Q8_0", "--imatrix", big_imatrix)
    assert_one_line_error(cp, str(big_imatrix), "blk.4.", "another model")
    assert_nothing_left(d, "out-other")
    # Same names, other widths: a model whose FFN is narrower.
    def narrow(meta, table):
        meta["feed_forward_length"] = (64, meta["feed_forward_length"][1])
        for name, (array, t) in list(table.items()):
            if "ffn_gate" in name or "ffn_up" in name:
                table[name] = (array[:64], t)
            elif "ffn_down" in name:
                table[name] = (array[:, :64], t)

    other = f32_model(d / "narrow.gguf", layers=6, mutate=narrow)
    cp = run_lumen("quantize", other, d / "out-narrow.gguf", "--type", "Q8_0", "--imatrix", big_imatrix)
    assert_one_line_error(cp, "ffn_down", "another model")
    assert_nothing_left(d, "out-narrow")
    # Not an imatrix at all.
    cp = run_lumen("quantize", big, d / "out-notimat.gguf", "--type", "Q8_0", "--imatrix", big)
    assert_one_line_error(cp, str(big))
    assert_nothing_left(d, "out-notimat")


def test_source_missing_a_tensor(d):
    def drop(meta, table):
        del table["blk.2.ffn_up.weight"]

    src = f32_model(d / "missing.gguf", mutate=drop)
    cp = run_lumen("quantize", src, d / "out-missing.gguf", "--type", "Q4_0")
    assert_one_line_error(cp, "blk.2.ffn_up.weight", str(src))
    assert_nothing_left(d, "out-missing")


def test_requantizing_needs_the_flag(d):
    q = d / "q8.gguf"
    cp = run_lumen("quantize", f32_model(d / "m2.gguf"), q, "--type", "Q8_0")
    assert cp.returncode == 0, describe(cp)
    cp = run_lumen("quantize", q, d / "out-requant.gguf", "--type", "Q4_0")
    assert_one_line_error(cp, "--allow-requantize", "Q8_0")
    assert_nothing_left(d, "out-requant")


def test_unwritable_output(d):
    src = f32_model(d / "m3.gguf")
    cp = run_lumen("quantize", src, "/nonexistent-dir/out.gguf", "--type", "Q8_0")
    assert_one_line_error(cp, "/nonexistent-dir/out.gguf")
    ro = d / "readonly"
    ro.mkdir(exist_ok=True)
    ro.chmod(0o555)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("running as a user who can write a read-only directory (root)")
        cp = run_lumen("quantize", src, ro / "out.gguf", "--type", "Q8_0")
        assert_one_line_error(cp, str(ro / "out.gguf"))
        assert not list(ro.iterdir())
    finally:
        ro.chmod(0o755)


def test_bad_kl_base(d):
    src = f32_model(d / "m4.gguf")
    cp = run_lumen("perplexity", "-m", src, "--kl-divergence-base", src, "--kl-divergence")
    assert_one_line_error(cp, str(src), "_logits_")
    cp = run_lumen("perplexity", "-m", src, "--kl-divergence")
    assert_one_line_error(cp, "--kl-divergence-base")
    base = d / "base.kld"
    cp = run_lumen("perplexity", "-m", src, "-f", text_file(d), "--ctx", 32, "--chunks", 2, "--kl-divergence-base", base)
    assert cp.returncode == 0, describe(cp)
    truncated = d / "truncated.kld"
    truncated.write_bytes(base.read_bytes()[: base.stat().st_size // 2])
    cp = run_lumen("perplexity", "-m", src, "--kl-divergence-base", truncated, "--kl-divergence")
    assert_one_line_error(cp, str(truncated), "truncated")


def test_interrupted_quantize_leaves_nothing(d):
    """Ctrl-C (SIGINT) or SIGTERM while the output is being written: the process ends by that
    signal and neither the output nor its temp file is left."""
    import signal
    import subprocess
    import time

    from conftest import REPO, lumen_bin

    model = REPO / "models" / "gemma-3-270m-q4_k_m.gguf"
    if not model.is_file():
        pytest.fail(f"{model} is missing: run scripts/setup (it installs the default model)")
    for sig in (signal.SIGINT, signal.SIGTERM):
        out = d / f"interrupted-{sig.name}.gguf"
        p = subprocess.Popen([lumen_bin(), "quantize", str(model), str(out), "--type", "Q8_0", "--allow-requantize"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while not list(d.glob(out.name + ".tmp-*")) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert p.poll() is None, f"quantize ended before it could be interrupted: {p.stderr.read()[-2000:]}"
        p.send_signal(sig)
        rc = p.wait(timeout=60)
        assert rc == -sig, f"exit {rc} after {sig.name}"
        assert_nothing_left(d, out.name)
