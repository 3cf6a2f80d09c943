"""Broken Gemma 3 GGUF files (wrong architecture, missing tensor, wrong shape, unsupported tensor
type, a missing or unknown metadata key, ...), written by llama.cpp's own Python writer
(tools/make_tiny_gemma3_gguf.py with a mutation), are refused with one `lumen: error:` line
naming the file and the key or tensor, exit status 1, and no output file.
"""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

from conftest import describe, run_lumen

import make_tiny_gemma3_gguf as mk

PREFIX = "lumen: error: "


def _set(key, value, vtype):
    def mutate(meta, tensors):
        meta[key] = (value, vtype)
    return mutate


def _drop_key(key):
    def mutate(meta, tensors):
        del meta[key]
    return mutate


def _drop_tensor(name):
    def mutate(meta, tensors):
        del tensors[name]
    return mutate


def _reshape(name, shape):
    def mutate(meta, tensors):
        _, qtype = tensors[name]
        tensors[name] = (np.zeros(shape, np.float32), qtype)
    return mutate


def _retype(name, qtype):
    def mutate(meta, tensors):
        tensors[name] = (tensors[name][0], qtype)
    return mutate


def _extra_tensor(name, shape):
    def mutate(meta, tensors):
        tensors[name] = (np.zeros(shape, np.float32), Q.F32)
    return mutate


# case -> (build kwargs, command, fragments the error line must contain)
BAD_FILES = {
    "wrong architecture": (dict(arch="llama"), "logits", ["general.architecture is 'llama'", "gemma3"]),
    "missing tensor": (dict(mutate=_drop_tensor("blk.1.ffn_up.weight")), "logits",
                       ["missing tensor 'blk.1.ffn_up.weight'", "[128, 64]"]),
    "missing embedding": (dict(mutate=_drop_tensor("token_embd.weight")), "inspect",
                          ["missing tensor 'token_embd.weight'"]),
    "wrong matrix shape": (dict(mutate=_reshape("blk.0.attn_q.weight", (256, 64))), "logits",
                           ["tensor 'blk.0.attn_q.weight' has shape [256, 64]", "needs [512, 64]"]),
    "wrong norm shape": (dict(mutate=_reshape("blk.2.attn_k_norm.weight", (128,))), "logits",
                         ["tensor 'blk.2.attn_k_norm.weight' has shape [128]", "needs [256]"]),
    "unsupported matrix type": (dict(mutate=_retype("blk.0.ffn_gate.weight", Q.F64)), "logits",
                                ["tensor 'blk.0.ffn_gate.weight' has type F64"]),
    "quantized norm": (dict(mutate=_retype("output_norm.weight", Q.Q8_0)), "logits",
                       ["tensor 'output_norm.weight' has type Q8_0", "norm weights"]),
    "tensor of a layer beyond block_count": (dict(mutate=_extra_tensor("blk.6.attn_norm.weight", (64,))), "logits",
                                             ["tensor 'blk.6.attn_norm.weight' is not part of the model"]),
    "missing block_count": (dict(mutate=_drop_key("block_count")), "inspect",
                            ["metadata key 'gemma3.block_count' is missing"]),
    "key_length of the wrong type": (dict(mutate=_set("attention.key_length", "256", V.STRING)), "inspect",
                                     ["metadata key 'gemma3.attention.key_length' is STRING, not an integer"]),
    "unknown gemma3 key": (dict(mutate=_set("attention.frobnication", 1, V.UINT32)), "inspect",
                           ["metadata key 'gemma3.attention.frobnication' is not one Lumen knows"]),
    "unsupported rope scaling": (dict(mutate=_set("rope.scaling.type", "yarn", V.STRING)), "inspect",
                                 ["metadata key 'gemma3.rope.scaling.type' is 'yarn'"]),
    "value_length differs": (dict(mutate=_set("attention.value_length", 128, V.UINT32)), "inspect",
                             ["metadata key 'gemma3.attention.value_length' is 128"]),
    "heads not divisible": (dict(mutate=_set("attention.head_count_kv", 3, V.UINT32)), "inspect",
                            ["query heads 2 not divisible by kv heads 3"]),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_gguf_is_one_line_error(tmp_path, case):
    kwargs, command, fragments = BAD_FILES[case]
    path = tmp_path / "bad.gguf"
    mk.build(path, **kwargs)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    if command == "logits":
        cp = run_lumen("logits", "-m", path, "--tokens", "2,5,6", "--out", out_dir / "x.npy")
    else:
        cp = run_lumen("inspect", path)
    info = describe(cp)
    assert cp.returncode == 1, f"{case}: want exit status 1\n{info}"
    lines = cp.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(PREFIX + str(path)), f"{case}: want one line naming the file\n{info}"
    for fragment in fragments:
        assert fragment in lines[0], f"{case}: the message must contain {fragment!r}: {lines[0]!r}"
    assert list(out_dir.iterdir()) == [], f"{case}: output left behind"
    assert cp.stdout == "", f"{case}: nothing on stdout\n{info}"
