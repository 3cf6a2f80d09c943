"""Forward-pass parity of `lumen` against transformers on tiny random Gemma 4 checkpoints.

  lumen logits -m DIR --tokens 2,105,9 --out F.npy    float32 .npy [T, V]
  lumen run    -m DIR --tokens ... -n N               last stdout line: JSON array of N ids

Logits: max|lumen - ref| / max|ref| <= 1e-4 over every position of a >= 64-token sequence.
Greedy: the 32 ids equal the reference's exactly (prompts are chosen so every step's top-1/top-2
margin is >= 5e-3 and no stop id appears, see conftest.greedy_case).
Figures are recorded in LUMEN_WORK_DIR/parity_report.json.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import (assert_greedy_sane, assert_reference_sane, describe, greedy_case, mk, model_dir, record,
                      ref, run_lumen, token_sequence, tokens_arg)

REL_TOL = 1e-4
ELEM_FLOOR = 0.1      # elementwise relative error is |a-b| / max(|ref|, ELEM_FLOOR): reported only
SEQ_LEN = 64
GREEDY_N = 32

# case id -> model_dir() arguments
CASES = {
    "tiny-mixed": dict(preset="tiny-mixed"),
    "tiny-wide": dict(preset="tiny-wide"),
    "tiny-kv": dict(preset="tiny-kv"),
    "tiny-12b-pattern": dict(preset="tiny-12b-pattern"),
    "tiny-vocab262k": dict(preset="tiny-vocab262k"),
    "tiny-rope-factor": dict(preset="tiny-rope-factor"),
    "tiny-mixed-sharded": dict(preset="tiny-mixed", shard_size="150KB"),
    "tiny-mixed-f32": dict(preset="tiny-mixed", dtype="float32"),
    "tiny-12b-pattern-f32": dict(preset="tiny-12b-pattern", dtype="float32", seed=1),
    "tiny-mixed-wrapper": dict(preset="tiny-mixed", wrapper=True, seed=2),
}
LOGIT_CASES = list(CASES)
GREEDY_CASES = [c for c in CASES if c != "tiny-vocab262k"]  # [T, 262144] per step: logits only


def _case(case):
    kw = CASES[case]
    mdir = model_dir(**kw)
    pd = mk.PRESETS[kw["preset"]]
    return mdir, pd


def _check_layout(case, mdir):
    files = sorted(p.name for p in mdir.glob("*.safetensors"))
    if "sharded" in case:
        assert (mdir / "model.safetensors.index.json").exists(), f"{case}: no index json"
        assert len(files) >= 3, f"{case}: wanted >= 3 shards, got {files}"
    else:
        assert files == ["model.safetensors"], f"{case}: {files}"


def _compare_logits(case, mdir, pd, tokens, tmp_path, tag):
    want = ref.logits(mdir, tokens)
    T, V = len(tokens), pd["vocab_size"]
    assert want.shape == (T, V)
    sane = assert_reference_sane(want, pd["final_logit_softcapping"], f"{case}/{tag}")

    out = tmp_path / "lumen_logits.npy"
    cp = run_lumen("logits", "-m", mdir, "--tokens", tokens_arg(tokens), "--out", out)
    assert cp.returncode == 0, describe(cp)
    assert out.exists(), f"lumen wrote no {out}\n" + describe(cp)
    got = np.load(out, allow_pickle=False)
    assert got.dtype == np.float32, f"{case}: lumen logits dtype {got.dtype}, want float32"
    assert got.shape == (T, V), f"{case}: lumen logits shape {got.shape}, want {(T, V)}"
    assert np.isfinite(got).all(), f"{case}: lumen logits have non-finite entries"

    diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
    scale = float(np.abs(want).max())
    rel = float(diff.max() / scale)
    elem = float((diff / np.maximum(np.abs(want), ELEM_FLOOR)).max())
    worst = np.unravel_index(int(diff.argmax()), diff.shape)
    argmax_agree = float(np.mean(got.argmax(-1) == want.argmax(-1)))
    figures = dict(tokens=T, vocab=V, max_abs_diff=float(diff.max()), max_abs_ref=scale, rel=rel,
                   elem_rel_floor=elem, elem_floor=ELEM_FLOOR, worst_pos=int(worst[0]), worst_id=int(worst[1]),
                   argmax_agree=argmax_agree, tol=REL_TOL, passed=rel <= REL_TOL,
                   ref_std=sane["std"], ref_frac_near_cap=sane["frac_near_cap"])
    record("logits", f"{case}/{tag}", figures)
    assert rel <= REL_TOL, (
        f"{case}/{tag}: max|lumen-ref|/max|ref| = {rel:.3e} > {REL_TOL:g} "
        f"(max abs diff {diff.max():.3e} at position {worst[0]} id {worst[1]}: lumen {got[worst]:.6f} "
        f"ref {want[worst]:.6f}; elementwise rel (floor {ELEM_FLOOR}) {elem:.3e}; "
        f"argmax agreement {argmax_agree:.2%})")


def _ids(ids) -> str:
    return ",".join(map(str, ids))


def _compare_greedy(case, mdir, pd, length, seed, tag):
    tokens, want, margin, used_seed = greedy_case(mdir, pd["vocab_size"], length, GREEDY_N, seed)
    cp = run_lumen("run", "-m", mdir, "--tokens", tokens_arg(tokens), "-n", GREEDY_N)
    assert cp.returncode == 0, describe(cp)
    lines = [ln for ln in cp.stdout.splitlines() if ln.strip()]
    assert lines, "lumen run printed nothing on stdout\n" + describe(cp)
    try:
        got = json.loads(lines[-1])
    except json.JSONDecodeError as e:
        raise AssertionError(f"last stdout line is not JSON: {lines[-1]!r}\n" + describe(cp)) from e
    assert isinstance(got, list) and all(isinstance(x, int) for x in got), f"not a JSON array of ids: {lines[-1]!r}"
    first_diff = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    record("greedy", f"{case}/{tag}", dict(prompt_len=length, prompt_seed=used_seed, n=GREEDY_N,
                                           ref_min_margin=margin, ref=_ids(want), lumen=_ids(got),
                                           first_mismatch=first_diff, passed=got == want))
    assert len(got) == GREEDY_N, f"{case}/{tag}: lumen produced {len(got)} ids, want {GREEDY_N}: {got}"
    assert got == want, (f"{case}/{tag}: greedy ids differ from step {first_diff}\n lumen {got}\n ref   {want}\n"
                         f"(reference min top-1/top-2 margin {margin:.3g}; prompt seed {used_seed})")


@pytest.mark.parametrize("case", LOGIT_CASES)
def test_reference_is_sane(case):
    """Runs without lumen: the reference side of every case is finite, varied and not saturated."""
    mdir, pd = _case(case)
    _check_layout(case, mdir)
    toks = token_sequence(pd["vocab_size"], SEQ_LEN, seed=11)
    lg = ref.logits(mdir, toks)
    s = assert_reference_sane(lg, pd["final_logit_softcapping"], case)
    fig = dict(s)
    if case in GREEDY_CASES:
        # generate() with the KV cache, each cross-checked against a no-cache argmax loop
        runs = [ref.greedy(mdir, token_sequence(pd["vocab_size"], SEQ_LEN, seed=s), GREEDY_N) for s in (11, 12, 13)]
        assert_greedy_sane(runs, case)
        fig["greedy_distinct"] = [len(set(ids)) for ids in runs]
    record("reference", case, fig)


@pytest.mark.parametrize("case", LOGIT_CASES)
def test_logits_parity(case, tmp_path):
    mdir, pd = _case(case)
    _check_layout(case, mdir)
    _compare_logits(case, mdir, pd, token_sequence(pd["vocab_size"], SEQ_LEN, seed=11), tmp_path, f"T{SEQ_LEN}")


@pytest.mark.parametrize("case", GREEDY_CASES)
def test_greedy_parity(case):
    mdir, pd = _case(case)
    _compare_greedy(case, mdir, pd, SEQ_LEN, seed=21, tag=f"T{SEQ_LEN}")


def test_logits_parity_long_tiny_mixed(tmp_path):
    """130 tokens: 16x the sliding window of 8, exercising window eviction at every sliding layer."""
    mdir, pd = _case("tiny-mixed")
    _compare_logits("tiny-mixed", mdir, pd, token_sequence(pd["vocab_size"], 130, seed=31), tmp_path, "T130")


def test_greedy_parity_long_tiny_mixed():
    mdir, pd = _case("tiny-mixed")
    _compare_greedy("tiny-mixed", mdir, pd, 130, seed=41, tag="T130")
