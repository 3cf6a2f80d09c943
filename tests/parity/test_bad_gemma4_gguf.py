"""Broken Gemma 4 GGUF files are refused with one `lumen: error:` line naming the file and the key
or tensor at fault, exit status 1, nothing on stdout and no output file: truncated tensor data, a
tensor whose type does not fit its shape or its bytes, unknown and missing `gemma4.*` keys, keys of
the wrong type or length, a missing or misshapen rope_freqs. The files are what
tools/gemma4_gguf.py (llama.cpp's converter, key for key) writes for a tiny transformers
checkpoint (preset tiny-mixed), edited. The tensors and keys of the rest of the family (per-layer
inputs, KV-shared blocks, experts) where the metadata does not announce them, and broken files of
it (llama.cpp's own converter's file of tiny-all, which has every feature, edited): contradicting
keys, misshapen or missing tensors, tensors of a feature a block does not have. Also runs on the
sanitizer build.
"""
from __future__ import annotations

import functools
import struct

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

import gemma4_gguf_support as support
from conftest import describe, run_lumen

import gemma4_gguf as g4

PREFIX = "lumen: error: "
PRESET = "tiny-mixed"  # 6 layers S S F S S F, hidden 64, head dims 16 / 32, vocab 512


@functools.lru_cache(maxsize=1)
def _base() -> g4.Prepared:
    return g4.prepare(support.hf_dir(PRESET), "f32")


def _set(key, value, vtype, sub_type=None):
    def mutate(p):
        p.kv["gemma4." + key] = (value, vtype, sub_type)
    return mutate


def _drop_key(key):
    def mutate(p):
        del p.kv["gemma4." + key]
    return mutate


def _drop_tensor(name):
    def mutate(p):
        del p.tensors[name]
    return mutate


def _add_tensor(name, shape):
    def mutate(p):
        p.tensors[name] = (np.zeros(shape, np.float32), Q.F32)
    return mutate


def _reshape(name, shape):
    def mutate(p):
        p.tensors[name] = (np.ones(shape, np.float32), p.tensors[name][1])
    return mutate


def _retype(name, qtype):
    def mutate(p):
        p.tensors[name] = (p.tensors[name][0], qtype)
    return mutate


def _patch_tensor_type(path, name: str, type_id: int) -> None:
    """Rewrites the ggml type of one tensor info in place (the bytes stay as written)."""
    data = bytearray(path.read_bytes())
    key = struct.pack("<Q", len(name)) + name.encode()
    at = data.index(key) + len(key)
    n_dims = struct.unpack_from("<I", data, at)[0]
    at += 4 + 8 * n_dims
    struct.pack_into("<I", data, at, type_id)
    path.write_bytes(bytes(data))


def _truncate(path, name: str) -> None:
    path.write_bytes(path.read_bytes()[:-100])


LAST_TENSOR = "blk.5.post_ffw_norm.weight"  # converter order: the last layer's last tensor

# case -> (mutation of the prepared file, edit of the written file, command, fragments of the line)
BAD_FILES = {
    "truncated tensor data": (None, _truncate, "logits", ["runs past the end of the file", "truncated"]),
    "type does not fit the shape": (None, lambda p, n: _patch_tensor_type(p, "blk.0.attn_q.weight", int(Q.Q4_K)),
                                    "inspect", ["tensor 'blk.0.attn_q.weight' is Q4_K", "not a multiple of the Q4_K block size"]),
    "type does not fit the bytes": (None, lambda p, n: _patch_tensor_type(p, "blk.0.ffn_up.weight", int(Q.Q8_0)),
                                    "inspect", ["tensor 'blk.0.ffn_up.weight' is Q8_0", "does not match its data"]),
    "unknown gemma4 key": (_set("attention.frobnication", 1, V.UINT32), None, "inspect",
                           ["metadata key 'gemma4.attention.frobnication' is not one Lumen knows for gemma4"]),
    "missing sliding_window_pattern": (_drop_key("attention.sliding_window_pattern"), None, "inspect",
                                       ["metadata key 'gemma4.attention.sliding_window_pattern' is missing"]),
    "missing key_length_swa": (_drop_key("attention.key_length_swa"), None, "inspect",
                               ["metadata key 'gemma4.attention.key_length_swa' is missing"]),
    "missing block_count": (_drop_key("block_count"), None, "inspect",
                            ["metadata key 'gemma4.block_count' is missing"]),
    "missing embedding_length_per_layer_input": (_drop_key("embedding_length_per_layer_input"), None, "inspect",
                                                 ["'gemma4.embedding_length_per_layer_input' is missing"]),
    "sliding_window_pattern of integers": (_set("attention.sliding_window_pattern", [1, 1, 0, 1, 1, 0], V.ARRAY, V.INT32),
                                           None, "inspect", ["'gemma4.attention.sliding_window_pattern' must be 6 BOOL"]),
    "head_count_kv of the wrong length": (_set("attention.head_count_kv", [2, 2, 1], V.ARRAY, V.INT32), None,
                                          "inspect", ["'gemma4.attention.head_count_kv' must be an integer or 6 integers"]),
    "value_length_swa differs": (_set("attention.value_length_swa", 8, V.UINT32), None, "inspect",
                                 ["'gemma4.attention.value_length_swa' is 8 but attention.key_length_swa is 16"]),
    "partial sliding rope": (_set("rope.dimension_count_swa", 8, V.UINT32), None, "inspect",
                             ["'gemma4.rope.dimension_count_swa'", "rotate every dimension"]),
    "key_length of the wrong type": (_set("attention.key_length", "32", V.STRING), None, "inspect",
                                     ["'gemma4.attention.key_length' is STRING, not an integer"]),
    "per-layer inputs without their table": (_set("embedding_length_per_layer_input", 256, V.UINT32), None, "inspect",
                                             ["missing tensor 'per_layer_token_embd.weight'",
                                              "embedding_length_per_layer_input 256"]),
    "shared KV layers with their own K/V": (_set("attention.shared_kv_layers", 2, V.UINT32), None, "logits",
                                            ["tensor 'blk.4.attn_k", "of a KV-shared block", "block 4 reads",
                                             "of block 3"]),
    "experts without routers": (_set("expert_count", 8, V.UINT32), None, "inspect",
                                ["'gemma4.expert_count' is 8 but no block has a router"]),
    "unannounced per-layer input tensor": (_add_tensor("per_layer_token_embd.weight", (512, 64)), None, "logits",
                                           ["tensor 'per_layer_token_embd.weight' belongs to per-layer input embeddings",
                                            "embedding_length_per_layer_input is 0"]),
    "router without expert keys": (_add_tensor("blk.0.ffn_gate_inp.weight", (8, 64)), None, "logits",
                                   ["tensor 'blk.0.ffn_gate_inp.weight' is a mixture-of-experts router",
                                    "'gemma4.expert_count' is missing"]),
    "missing rope_freqs": (_drop_tensor("rope_freqs.weight"), None, "inspect",
                           ["missing tensor 'rope_freqs.weight'"]),
    "rope_freqs of the wrong shape": (_reshape("rope_freqs.weight", (8,)), None, "inspect",
                                      ["tensor 'rope_freqs.weight' has shape [8]", "need [16]"]),
    "missing layer tensor": (_drop_tensor("blk.2.attn_k.weight"), None, "logits",
                             ["missing tensor 'blk.2.attn_k.weight'", "[32, 64]"]),
    "quantized norm": (_retype("blk.1.attn_norm.weight", Q.Q8_0), None, "logits",
                       ["tensor 'blk.1.attn_norm.weight' has type Q8_0"]),
    "wrong architecture": (lambda p: p.kv.__setitem__("general.architecture", ("gemma5", V.STRING, None)), None,
                           "inspect", ["general.architecture is 'gemma5'", "'gemma4'"]),
}


@functools.lru_cache(maxsize=1)
def _family_base() -> g4.Prepared:
    """tiny-all (7 blocks S S F S F S F, the last 3 KV-shared; per-layer inputs 32 wide; 8 experts,
    top 3, 24 wide; double-wide MLP on the shared blocks) as llama.cpp's converter writes it."""
    path = support.llama_cpp_ggufs([("tiny-all", "f32")])[("tiny-all", "f32")]
    return g4.read_prepared(path)


# Broken files of the rest of the family: case -> (mutation of tiny-all's file, command, fragments).
BAD_FAMILY_FILES = {
    "every block KV-shared": (_set("attention.shared_kv_layers", 7, V.UINT32), "inspect",
                              ["'gemma4.attention.shared_kv_layers' is 7 but there are 7 blocks"]),
    "a shared block with no earlier block of its kind": (
        _set("attention.shared_kv_layers", 6, V.UINT32), "inspect",
        ["'gemma4.attention.shared_kv_layers' is 6: shared block 2 (full) has no earlier full block"]),
    "K/V of a KV-shared block": (_add_tensor("blk.6.attn_k.weight", (32, 64)), "logits",
                                 ["tensor 'blk.6.attn_k.weight' is a key/value tensor of a KV-shared block",
                                  "block 6 reads the keys and values of block 2"]),
    "more experts per token than experts": (_set("expert_used_count", 9, V.UINT32), "inspect",
                                            ["'gemma4.expert_used_count' is 9 but there are 8 experts"]),
    "missing expert width": (_drop_key("expert_feed_forward_length"), "inspect",
                             ["'gemma4.expert_feed_forward_length' is missing (the experts' width)"]),
    "missing experts per token": (_drop_key("expert_used_count"), "inspect",
                                  ["'gemma4.expert_used_count' is missing"]),
    "expert stack of the wrong shape": (_reshape("blk.3.ffn_gate_up_exps.weight", (8, 40, 64)), "logits",
                                        ["tensor 'blk.3.ffn_gate_up_exps.weight' has shape [8, 40, 64]",
                                         "needs [8, 48, 64]"]),
    "missing expert down stack": (_drop_tensor("blk.1.ffn_down_exps.weight"), "logits",
                                  ["missing tensor 'blk.1.ffn_down_exps.weight'", "[8, 64, 24]"]),
    "expert tensors of a block without a router": (
        _drop_tensor("blk.1.ffn_gate_inp.weight"), "logits",
        ["tensor 'blk.1.", "belongs to a mixture-of-experts block", "block 1 has no router"]),
    "missing router scale": (_drop_tensor("blk.2.ffn_gate_inp.scale"), "logits",
                             ["missing tensor 'blk.2.ffn_gate_inp.scale'", "[64]"]),
    "per-layer table of the wrong width": (_reshape("per_layer_token_embd.weight", (512, 200)), "inspect",
                                           ["tensor 'per_layer_token_embd.weight' has shape [512, 200]",
                                            "need [rows, 224]"]),
    "missing per-layer projection": (_drop_tensor("per_layer_model_proj.weight"), "logits",
                                     ["missing tensor 'per_layer_model_proj.weight'", "[224, 64]"]),
    "missing per-layer gate": (_drop_tensor("blk.5.inp_gate.weight"), "logits",
                               ["missing tensor 'blk.5.inp_gate.weight'", "[32, 64]"]),
    "unknown tensor": (_add_tensor("blk.3.laurel_l.weight", (32, 64)), "logits",
                       ["tensor 'blk.3.laurel_l.weight' is not part of the model the metadata describes"]),
}


def _check_one_line_error(tmp_path, case, prepared, edit, command, fragments):
    path = tmp_path / "bad.gguf"
    g4.write(prepared, path)
    if edit is not None:
        edit(path, LAST_TENSOR)
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


@pytest.mark.parametrize("case", list(BAD_FAMILY_FILES))
def test_bad_family_gguf_is_one_line_error(tmp_path, case):
    mutate, command, fragments = BAD_FAMILY_FILES[case]
    prepared = _family_base().copy()
    mutate(prepared)
    _check_one_line_error(tmp_path, case, prepared, None, command, fragments)


def test_the_unbroken_family_file_loads(tmp_path):
    path = tmp_path / "good.gguf"
    g4.write(_family_base().copy(), path)
    cp = run_lumen("logits", "-m", path, "--tokens", "2,5,6", "--out", tmp_path / "x.npy")
    assert cp.returncode == 0, describe(cp)
    assert np.load(tmp_path / "x.npy").shape == (3, 512)


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_gemma4_gguf_is_one_line_error(tmp_path, case):
    mutate, edit, command, fragments = BAD_FILES[case]
    prepared = _base().copy()
    if mutate is not None:
        mutate(prepared)
    _check_one_line_error(tmp_path, case, prepared, edit, command, fragments)


def test_the_unbroken_file_loads(tmp_path):
    """The base every case edits is a good file: each failure above is the edit's."""
    path = tmp_path / "good.gguf"
    g4.write(_base().copy(), path)
    cp = run_lumen("logits", "-m", path, "--tokens", "2,5,6", "--out", tmp_path / "x.npy")
    assert cp.returncode == 0, describe(cp)
    assert np.load(tmp_path / "x.npy").shape == (3, 512)
