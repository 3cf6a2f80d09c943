"""Weights from a LiteRT-LM package (issue 8, points 3-5) on tiny hand-written Gemma 4 packages.

The packages come from tools/make_tiny_litertlm.py: the same quantized tensors (fixed-scale
offset-binary int4, per-channel int4 with zero point 8 and 0, per-channel int8, f32 norms)
stored named, unnamed with a map file, with fused q/k/v, with two constants swapped, and with a
layer missing; `source-q/` is the source checkpoint after the same quantization.

  * package path logits == checkpoint path logits (weights dequantized exactly: bit-equal; on
    the int kernels: within the int8-activation tolerance below);
  * `lumen verify` passes on the correct packages, names the layer and role of two swapped
    constants, reports the missing layer and the shift of the groups after it;
  * the manifest's `unsupported` gate: refused without a receipt, lifted by a passing receipt
    for this exact package, not by one for another package or a failing one.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import describe, run_lumen, token_sequence, tokens_arg
from litert_tiny import tiny_packages

import make_tiny_litertlm as mtl

# int8 activations (per 32-block, the int kernels) against f32 activations on the same weights:
# the logits of this hidden-64 random model (logit std ~3.3) move by up to ~0.46 (measured);
# asserted: max |diff| <= 0.25 x the reference logit std, and the same argmax wherever the
# reference's top-1/top-2 margin exceeds twice that.
KERNEL_LOGIT_TOL_STD = 0.25


@pytest.fixture(scope="module")
def pk() -> Path:
    return tiny_packages()


def logits(tmp_path: Path, model, tokens, *extra) -> np.ndarray:
    out = tmp_path / f"l{len(list(tmp_path.iterdir()))}.npy"
    cp = run_lumen("logits", "-m", model, "--tokens", tokens_arg(tokens), "--out", out, *extra)
    assert cp.returncode == 0, describe(cp)
    return np.load(out)


def verify(pkg, src, *extra):
    return run_lumen("verify", pkg, "--against", src, *extra)


TOKENS = token_sequence(512, 24, seed=3)


@pytest.mark.parametrize("variant,extra", [("tiny", []), ("tiny-unnamed", ["--map", "tiny-unnamed.map.json"]),
                                           ("tiny-fused", [])])
def test_package_logits_equal_checkpoint_logits(pk, tmp_path, variant, extra):
    extra = [str(pk / e) if e.endswith(".json") else e for e in extra]
    cfg = ["--config", str(pk / "source-q" / "config.json")]
    ref = logits(tmp_path, pk / "source-q", TOKENS)
    exact = logits(tmp_path, pk / f"{variant}.litertlm", TOKENS, *cfg, *extra, "--quant", "f32")
    assert exact.shape == ref.shape == (len(TOKENS), 512)
    assert np.array_equal(exact, ref), f"{variant}: dequantized package logits differ by {np.abs(exact - ref).max()}"
    kern = logits(tmp_path, pk / f"{variant}.litertlm", TOKENS, *cfg, *extra)
    diff = np.abs(kern - ref).max()
    tol = KERNEL_LOGIT_TOL_STD * ref.std()
    assert 0 < diff <= tol, f"{variant}: int-kernel logits differ by {diff} (tolerance {tol})"
    margin = np.sort(ref, -1)[:, -1] - np.sort(ref, -1)[:, -2]
    decisive = margin > 2 * tol
    assert decisive.sum() >= 5
    assert np.array_equal(kern.argmax(-1)[decisive], ref.argmax(-1)[decisive])


def test_package_tokenizer_comes_from_its_sp_section(pk, tmp_path):
    cp = run_lumen("run", "-m", pk / "tiny.litertlm", "--config", pk / "source-q" / "config.json",
                   "-p", "the license", "--raw", "-n", "4", "--temp", "0")
    assert cp.returncode == 0, describe(cp)
    # Same greedy continuation from the checkpoint with the same SentencePiece model.
    d = tmp_path / "ckpt"
    shutil.copytree(pk / "source-q", d)
    shutil.copy(pk / "tokenizer.model", d / "tokenizer.model")
    ref = run_lumen("run", "-m", d, "-p", "the license", "--raw", "-n", "4", "--temp", "0")
    assert ref.returncode == 0, describe(ref)
    assert cp.stdout == ref.stdout


def test_verify_passes_on_the_correct_packages(pk, tmp_path):
    for variant, extra in [("tiny", []), ("tiny-unnamed", ["--map", pk / "tiny-unnamed.map.json"]), ("tiny-fused", [])]:
        receipt = tmp_path / f"{variant}.receipt.json"
        cp = verify(pk / f"{variant}.litertlm", pk / "source-q", *extra, "--out", receipt)
        assert cp.returncode == 0, describe(cp)
        assert "verdict: PASS" in cp.stdout
        r = json.loads(receipt.read_text())
        assert r["schema"] == "lumen.litert-receipt/v1" and r["verdict"] == "pass" and r["faults"] == []
        assert r["package"]["sha256"] == hashlib.sha256((pk / f"{variant}.litertlm").read_bytes()).hexdigest()
        names = {(t["layer"], t["role"]) for t in r["tensors"]}
        n_src = len(json.loads((pk / "source-q" / "model.safetensors").read_bytes()[8:8 + int.from_bytes(
            (pk / "source-q" / "model.safetensors").read_bytes()[:8], "little")]).keys() - {"__metadata__"})
        assert len(names) == len(r["tensors"]) == n_src
        assert all(t["match"] and t["max_abs_error"] == 0 for t in r["tensors"])
        assert r["first_token_logits"]["f32"]["match"] is True
        if variant == "tiny-unnamed":
            assert r["map"]["kind"] == "file"
            assert r["map"]["sha256"] == hashlib.sha256((pk / "tiny-unnamed.map.json").read_bytes()).hexdigest()
        else:
            assert r["map"]["kind"] == "name-rules"


def test_verify_names_the_layer_and_role_of_swapped_constants(pk, tmp_path):
    receipt = tmp_path / "swapped.json"
    cp = verify(pk / "tiny-swapped.litertlm", pk / "source-q", "--out", receipt)
    assert cp.returncode == 2, describe(cp)
    layer = mtl.SWAP_LAYER
    assert f"layer {layer} mlp.gate_proj" in cp.stdout and f"holds source layer {layer} mlp.up_proj" in cp.stdout
    assert f"layer {layer} mlp.up_proj" in cp.stdout and f"holds source layer {layer} mlp.gate_proj" in cp.stdout
    r = json.loads(receipt.read_text())
    assert r["verdict"] == "fail"
    bad = {(t["layer"], t["role"]) for t in r["tensors"] if not t["match"]}
    assert bad == {(layer, "mlp.gate_proj"), (layer, "mlp.up_proj")}
    assert "skipped" in r["first_token_logits"]


def test_verify_reports_the_missing_layer_and_the_shift(pk, tmp_path):
    receipt = tmp_path / "missing.json"
    cp = verify(pk / "tiny-missing-layer.litertlm", pk / "source-q", "--out", receipt)
    assert cp.returncode == 2, describe(cp)
    m = mtl.MISSING_LAYER
    finding = f"source layer {m} has no group; groups {m}..4 shifted by +1"
    assert finding in cp.stdout, cp.stdout
    r = json.loads(receipt.read_text())
    assert r["layers"]["finding"] == finding
    assert r["layers"]["package_groups"] == 5 and r["layers"]["source_layers"] == 6
    assert r["layers"]["group_holds_source_layer"] == {"0": 0, "1": 1, "2": 2, "3": 4, "4": 5}
    assert any(n.startswith("layers.5.") for n in r["unmapped_source_tensors"])


def test_a_package_with_a_layer_missing_does_not_load(pk, tmp_path):
    cp = run_lumen("logits", "-m", pk / "tiny-missing-layer.litertlm", "--config", pk / "source-q" / "config.json",
                   "--tokens", "2,5", "--out", tmp_path / "x.npy")
    assert cp.returncode == 1, describe(cp)
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and "no constant maps to layer 5" in lines[0], cp.stderr
    assert not (tmp_path / "x.npy").exists()


def test_a_map_written_for_another_package_is_refused(pk, tmp_path):
    # The unnamed package's map on the named package: another tensor table.
    cp = run_lumen("logits", "-m", pk / "tiny.litertlm", "--config", pk / "source-q" / "config.json",
                   "--map", pk / "tiny-unnamed.map.json", "--tokens", "2", "--out", tmp_path / "x.npy")
    assert cp.returncode == 1 and "written for another package" in cp.stderr, describe(cp)
    # A map whose hash was edited.
    m = json.loads((pk / "tiny-unnamed.map.json").read_text())
    m["package_tensor_table_sha256"] = "0" * 64
    bad = tmp_path / "bad.map.json"
    bad.write_text(json.dumps(m))
    cp = verify(pk / "tiny-unnamed.litertlm", pk / "source-q", "--map", bad)
    assert cp.returncode == 1 and "written for another package" in cp.stderr, describe(cp)
    assert len(cp.stderr.strip().splitlines()) == 1


def test_unnamed_package_needs_its_map(pk, tmp_path):
    cp = run_lumen("logits", "-m", pk / "tiny-unnamed.litertlm", "--config", pk / "source-q" / "config.json",
                   "--tokens", "2", "--out", tmp_path / "x.npy")
    assert cp.returncode == 1 and "no constant maps to" in cp.stderr, describe(cp)


# ---------------------------------------------------------------------------- the gate


@pytest.fixture(scope="module")
def receipts(pk, tmp_path_factory):
    d = tmp_path_factory.mktemp("receipts")
    good, swapped = d / "good.json", d / "swapped.json"
    assert verify(pk / "tiny.litertlm", pk / "source-q", "--out", good).returncode == 0
    assert verify(pk / "tiny-swapped.litertlm", pk / "source-q", "--out", swapped).returncode == 2
    return good, swapped


def gated(pk, tmp_path, *extra, model=None):
    return run_lumen("logits", "-m", model or pk / "tiny.litertlm", "--config", pk / "tiny-manifest.json",
                     "--tokens", tokens_arg(TOKENS[:6]), "--out", tmp_path / "g.npy", *extra)


def test_manifest_gate_refuses_without_receipt(pk, tmp_path):
    block = json.loads((pk / "tiny-manifest.json").read_text())["package"]["litertlm"]["unsupported"]
    cp = gated(pk, tmp_path)
    assert cp.returncode == 1, describe(cp)
    line = cp.stderr.strip()
    assert len(line.splitlines()) == 1
    for part in (block["code"], block["message"], block["recommendation"], "no parity receipt"):
        assert part in line, line
    assert not (tmp_path / "g.npy").exists()


def test_passing_receipt_lifts_the_gate(pk, tmp_path, receipts):
    good, _ = receipts
    cp = gated(pk, tmp_path, "--receipt", good)
    assert cp.returncode == 0, describe(cp)
    # The manifest's spec runs the same model as the HF config does.
    ref = logits(tmp_path, pk / "tiny.litertlm", TOKENS[:6], "--config", pk / "source-q" / "config.json")
    assert np.array_equal(np.load(tmp_path / "g.npy"), ref)
    # Beside the package as PACKAGE.receipt.json.
    d = tmp_path / "beside"
    d.mkdir()
    shutil.copy(pk / "tiny.litertlm", d / "tiny.litertlm")
    shutil.copy(good, d / "tiny.litertlm.receipt.json")
    cp = gated(pk, tmp_path, model=d / "tiny.litertlm")
    assert cp.returncode == 0, describe(cp)


def test_other_receipts_do_not_lift_the_gate(pk, tmp_path, receipts):
    good, swapped = receipts
    cp = gated(pk, tmp_path, "--receipt", swapped)
    assert cp.returncode == 1 and "is for another package" in cp.stderr, describe(cp)
    failing = json.loads(good.read_text())
    failing["verdict"] = "fail"
    f = tmp_path / "failing.json"
    f.write_text(json.dumps(failing))
    cp = gated(pk, tmp_path, "--receipt", f)
    assert cp.returncode == 1 and "has verdict 'fail'" in cp.stderr, describe(cp)
    # The swapped package with its own (failing) receipt stays refused.
    cp = gated(pk, tmp_path, "--receipt", swapped, model=pk / "tiny-swapped.litertlm")
    assert cp.returncode == 1 and "has verdict 'fail'" in cp.stderr, describe(cp)
    cp = gated(pk, tmp_path, "--allow-unverified")
    assert cp.returncode == 0, describe(cp)
