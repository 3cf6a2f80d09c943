"""Bad inputs to the LiteRT weights path (`logits`/`run` on a .litertlm, `lumen verify`): each is
one clear line on stderr naming the file and field or constant at fault, exit 1, nothing written.
Also runs on the sanitizer build (the map, receipt and constant readers)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import describe, run_lumen
from litert_tiny import tiny_packages


@pytest.fixture(scope="module")
def pk() -> Path:
    return tiny_packages()


def one_line_error(cp, *needles):
    assert cp.returncode == 1, describe(cp)
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lumen: error: "), describe(cp)
    for n in needles:
        assert n in lines[0], describe(cp)


def logits(pkg, tmp_path, *extra):
    out = tmp_path / "x.npy"
    cp = run_lumen("logits", "-m", pkg, "--tokens", "2,7", "--out", out, *extra)
    if cp.returncode != 0:
        assert not out.exists()
    return cp


def test_bad_map_files(pk, tmp_path):
    good = json.loads((pk / "tiny-unnamed.map.json").read_text())
    cfg = ["--config", pk / "source-q" / "config.json"]

    def with_map(name, text):
        p = tmp_path / name
        p.write_text(text)
        return logits(pk / "tiny-unnamed.litertlm", tmp_path, *cfg, "--map", p), str(p)

    cp, p = with_map("notjson.json", "{ nope")
    one_line_error(cp, p, "not valid JSON")
    m = dict(good, schema="lumen.litert-map/v9")
    cp, p = with_map("schema.json", json.dumps(m))
    one_line_error(cp, p, "schema")
    m = json.loads(json.dumps(good))
    m["entries"][5]["role"] = "mlp.fused_up"
    cp, p = with_map("role.json", json.dumps(m))
    one_line_error(cp, p, "entries[5]", "unknown role 'mlp.fused_up'", "arith.constant5")
    m = json.loads(json.dumps(good))
    m["entries"][3]["constant"] = 10_000
    cp, p = with_map("range.json", json.dumps(m))
    one_line_error(cp, p, "entries[3]", "is not a constant of")
    m = json.loads(json.dumps(good))
    m["entries"][1]["layer"], m["entries"][1]["role"] = m["entries"][2]["layer"], m["entries"][2]["role"]
    cp, p = with_map("dup.json", json.dumps(m))
    one_line_error(cp, p, "arith.constant1", "arith.constant2", "both map to")
    m = json.loads(json.dumps(good))
    del m["entries"][0]
    cp, p = with_map("missing.json", json.dumps(m))
    one_line_error(cp, "no constant maps to")
    m = json.loads(json.dumps(good))
    del m["fixed_int4"]
    cp, p = with_map("nofixed.json", json.dumps(m))
    one_line_error(cp, "has no quantization parameters and the map declares no fixed_int4 scale")
    cp = logits(pk / "tiny-unnamed.litertlm", tmp_path, *cfg, "--map", tmp_path / "absent.json")
    one_line_error(cp, "absent.json", "cannot read the map file")


def test_bad_packages(pk, tmp_path):
    cfg = ["--config", pk / "source-q" / "config.json"]
    data = (pk / "tiny.litertlm").read_bytes()
    for name, blob, needle in [("trunc.litertlm", data[: len(data) // 2], "trunc.litertlm"),
                               ("short.litertlm", data[:20], "short.litertlm"),
                               ("magic.litertlm", b"LITERTLX" + data[8:], "not a GGUF file")]:
        p = tmp_path / name
        p.write_bytes(blob)
        one_line_error(logits(p, tmp_path, *cfg), needle)
    # No config: the package does not carry it.
    d = tmp_path / "alone"
    d.mkdir()
    shutil.copy(pk / "tiny.litertlm", d / "tiny.litertlm")
    one_line_error(logits(d / "tiny.litertlm", tmp_path), "pass --config")
    # A config of another model: the constants' shapes do not fit.
    other = json.loads((pk / "source-q" / "config.json").read_text())
    other["intermediate_size"] = 96
    (d / "config.json").write_text(json.dumps(other))
    one_line_error(logits(d / "tiny.litertlm", tmp_path), "mlp.down_proj", "which the model spec needs as [64, 96]")


def test_verify_usage_and_bad_input(pk, tmp_path):
    one_line_error(run_lumen("verify", pk / "tiny.litertlm"), "--against")
    one_line_error(run_lumen("verify", "--against", pk / "source-q"), "give the package")
    one_line_error(run_lumen("verify", pk / "tiny.litertlm", "--against", tmp_path / "nowhere"), "no such source")
    one_line_error(run_lumen("verify", tmp_path / "none.litertlm", "--against", pk / "source-q"), "none.litertlm")
    one_line_error(run_lumen("verify", pk / "tiny.litertlm", "--against", pk / "source-q", "--tokens", "2,x"), "--tokens")
    out = tmp_path / "sub" / "r.json"  # its folder does not exist
    cp = run_lumen("verify", pk / "tiny.litertlm", "--against", pk / "source-q", "--out", out)
    one_line_error(cp, "cannot write the receipt")
    assert not any((tmp_path).glob("sub*"))


def test_bad_receipts_keep_the_gate_closed(pk, tmp_path):
    for name, text, needle in [("notjson.json", "{", "is not valid JSON"),
                               ("schema.json", json.dumps({"schema": "x", "verdict": "pass"}), "is not a lumen.litert-receipt/v1"),
                               ("nosha.json", json.dumps({"schema": "lumen.litert-receipt/v1", "verdict": "pass"}), "names no package SHA-256")]:
        p = tmp_path / name
        p.write_text(text)
        cp = logits(pk / "tiny.litertlm", tmp_path, "--config", pk / "tiny-manifest.json", "--receipt", p)
        one_line_error(cp, "tiny-litert-unverified", needle)
    cp = logits(pk / "tiny.litertlm", tmp_path, "--config", pk / "tiny-manifest.json", "--receipt", tmp_path / "absent.json")
    one_line_error(cp, "cannot be read")
