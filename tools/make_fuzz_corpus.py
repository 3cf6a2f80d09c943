#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora, dictionaries and data files (tests/fuzz/).

    .venv/bin/python tools/make_fuzz_corpus.py [--lumen build/lumen]

The outputs are committed (small: a few KB each, the largest ~50 KB); this script says where
each came from and makes them again. Seeds are valid inputs of each reader or parser, so the
fuzzer starts from files that reach deep (a tiny Gemma 3 GGUF that binds, a packed model
that binds, packages written by Google's builder, the real fixture packages) plus a few
edge cases. Dictionaries are the string literals the parsers compare against (metadata keys,
JSON field names), taken from their sources. Test tool only.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUZZ = ROOT / "tests" / "fuzz"
SHARED = ROOT.parent / "shared" if (ROOT.parent / "shared").is_dir() else Path("/work/shared")
sys.path.insert(0, str(ROOT / "tools"))


def put(target: str, name: str, data: bytes | str) -> None:
    if isinstance(data, str):
        data = data.encode()
    d = FUZZ / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


# ------------------------------------------------------------------------- tokenizers

def tiny_tokenizer_json() -> dict:
    """The unit tests' small tokenizer (tests/unit/test_tokenizer.cpp): byte fallback,
    merges by rank, specials, Gemma's normalizer / pre-tokenizer / decoder."""
    vocab = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "\u2581",
             "a", "b", "c", "ab", "bc", "abc", "\u2581a", "\n"]
    vocab += [f"<0x{b:02X}>" for b in range(256)]
    vocab += ["aa", "<|turn>", "<turn|>"]
    added = [{"id": i, "content": vocab[i], "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i in (0, 1, 2, 3, 4, 5, 272, 273)]
    added.append({"id": 274, "content": "<extra>", "normalized": False, "special": False})
    return {
        "version": "1.0",
        "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                          "invert": False},
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True,
                  "vocab": {p: i for i, p in enumerate(vocab)},
                  "merges": [["b", "c"], "a b", ["a", "bc"], ["\u2581", "a"], ["a", "a"]]},
    }


def spm_training_text() -> str:
    words = ["the", "model", "reads", "tokens", "from", "files", "of", "strangers", "and", "answers",
             "quickly", "Gemma", "Lumen", "server", "cancel", "drain", "memory", "budget", "fuzz", "bytes",
             "été", "naïve", "über", "日本語", "テキスト", "🙂", "12345", "x=y+z;", "<tag>", "\t"]
    lines = []
    for i in range(600):
        lines.append(" ".join(words[(i * 7 + k * 3) % len(words)] for k in range(3 + i % 9)))
    return "\n".join(lines) + "\n"


def make_spm_model(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "text.txt"
        text.write_text(spm_training_text(), encoding="utf-8")
        subprocess.run(["spm_train", f"--input={text}", f"--model_prefix={tmp}/tiny", "--vocab_size=400",
                        "--model_type=bpe", "--byte_fallback=true", "--normalization_rule_name=identity",
                        "--add_dummy_prefix=false", "--remove_extra_whitespaces=false", "--split_digits=true",
                        "--user_defined_symbols=<start_of_turn>,<end_of_turn>", "--character_coverage=1.0",
                        "--minloglevel=2"], check=True, capture_output=True)
        out.write_bytes((Path(tmp) / "tiny.model").read_bytes())


# ------------------------------------------------------------------------- GGUF

def tiny_gemma3_gguf(path: Path, layers: int = 1) -> None:
    import make_tiny_gemma3_gguf as mk
    from gguf import GGMLQuantizationType as Q

    # Smaller than the parity tests' model: the fuzzer mutates every byte of it.
    mk.HIDDEN, mk.HEADS, mk.KV_HEADS, mk.HEAD_DIM, mk.FFN = 32, 2, 1, 32, 32
    def mutate(meta, table):
        for name, (array, qtype) in list(table.items()):
            if qtype != Q.F32:
                table[name] = (array, Q.Q4_0 if name == "token_embd.weight" else qtype)
    mk.build(path, layers=layers, window=4, mutate=mutate)


def gguf_vocab_only(path: Path, model: str, arch: str, merges: bool) -> None:
    import gguf
    tok = tiny_tokenizer_json()
    pieces = [None] * len(tok["model"]["vocab"])
    for p, i in tok["model"]["vocab"].items():
        pieces[i] = p
    types = [3 if (p.startswith("<") and p.endswith(">") and not p.startswith("<0x") and len(p) > 2)
             else 6 if p.startswith("<0x") else 1 for p in pieces]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_tokenizer_model(model)
    w.add_token_list(pieces)
    w.add_token_scores([-float(i) for i in range(len(pieces))])
    w.add_token_types(types)
    if merges:
        w.add_token_merges(["b c", "a b", "a bc", "\u2581 a", "a a"])
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_chat_template("{{ bos_token }}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_all_value_types(path: Path) -> None:
    import gguf
    import numpy as np
    T = gguf.GGUFValueType
    w = gguf.GGUFWriter(str(path), "gemma3")
    for i, (vt, v) in enumerate([(T.UINT8, 200), (T.INT8, -5), (T.UINT16, 60000), (T.INT16, -300),
                                 (T.UINT32, 7), (T.INT32, -7), (T.FLOAT32, 0.5), (T.BOOL, True),
                                 (T.STRING, "text"), (T.UINT64, 2**63), (T.INT64, -(2**40)), (T.FLOAT64, 2.5)]):
        w.add_key_value(f"test.scalar{i}", v, vt)
    w.add_array("test.ints", [1, 2, 3])
    w.add_array("test.floats", [0.5, 1.5])
    w.add_array("test.strings", ["a", "bc", ""])
    w.add_array("test.bools", [True, False])
    w.add_array("test.nested", [[1, 2], [3]])
    w.add_uint32("general.alignment", 64)
    w.add_tensor("t.f32", np.arange(8, dtype=np.float32))
    w.add_tensor("t.f16", np.arange(64, dtype=np.float16).reshape(2, 32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ------------------------------------------------------------------------- safetensors

def safetensors_bytes(tensors: dict, metadata: dict | None = None) -> bytes:
    header, data = {}, b""
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    if metadata is not None:
        header["__metadata__"] = metadata
    h = dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


# ------------------------------------------------------------------------- configs

def tiny_gemma4_config() -> dict:
    return {
        "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "attention_bias": False,
        "attention_k_eq_v": True, "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0,
        "final_logit_softcapping": 30.0, "global_head_dim": 64, "head_dim": 32,
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 64, "hidden_size_per_layer_input": 0,
        "intermediate_size": 64, "layer_types": ["sliding_attention", "full_attention"],
        "max_position_embeddings": 256, "num_attention_heads": 2, "num_global_key_value_heads": 1,
        "num_hidden_layers": 2, "num_key_value_heads": 1, "num_kv_shared_layers": 0, "rms_norm_eps": 1e-06,
        "rope_parameters": {"full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                                               "rope_type": "proportional"},
                            "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}},
        "sliding_window": 16, "tie_word_embeddings": True, "use_double_wide_mlp": False, "vocab_size": 300,
        "vocab_size_per_layer_input": 300, "enable_moe_block": False,
    }


def tiny_gemma3_config() -> dict:
    return {
        "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "attention_bias": False,
        "attn_logit_softcapping": None, "bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0,
        "final_logit_softcapping": None, "head_dim": 32, "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 64, "intermediate_size": 64, "max_position_embeddings": 512, "num_attention_heads": 2,
        "num_hidden_layers": 3, "num_key_value_heads": 1, "query_pre_attn_scalar": 32, "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000.0, "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": 16,
        "sliding_window_pattern": 2, "vocab_size": 300,
    }


# ------------------------------------------------------------------------- dictionaries

LITERAL = re.compile(r'"((?:[^"\\\n]|\\.){2,48})"')


def literals(paths: list[str], pattern: str = r"^[A-Za-z_][A-Za-z0-9_.\-]*$") -> list[str]:
    keep = re.compile(pattern)
    seen: list[str] = []
    for p in paths:
        for path in sorted(ROOT.glob(p)):
            for m in LITERAL.finditer(path.read_text(encoding="utf-8")):
                s = m.group(1)
                if keep.match(s) and s not in seen:
                    seen.append(s)
    return seen


def write_dict(target: str, words: list[str], raw: list[bytes] = ()) -> None:
    d = FUZZ / "dict"
    d.mkdir(parents=True, exist_ok=True)
    lines = [f"# {target}: made by tools/make_fuzz_corpus.py from the parser's own string literals"]
    def entry(data: bytes) -> str:  # libFuzzer's dictionary syntax: "...", with \\ \" \xNN escapes
        return '"' + "".join(chr(b) if 0x20 <= b < 0x7f and b not in (0x22, 0x5c) else f"\\x{b:02X}"
                             for b in data) + '"'
    lines += [entry(w) for w in raw]
    lines += [entry(w.encode()) for w in words]
    (d / f"{target}.dict").write_text("\n".join(lines) + "\n")


JSON_TOKENS = ["{", "}", "[", "]", ":", ",", "null", "true", "false", "0", "-1", "1e308", "\"\"", "[[", "{\"\":"]


def json_dict(target: str, sources: list[str], quoted: bool = True) -> None:
    words = literals(sources)
    write_dict(target, JSON_TOKENS + ([f'"{w}"' for w in words] if quoted else words))


# ------------------------------------------------------------------------- main

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lumen", default=str(ROOT / "build" / "lumen"), help="lumen binary (for the packed seed)")
    args = parser.parse_args()

    data = FUZZ / "data"
    data.mkdir(parents=True, exist_ok=True)
    tok = tiny_tokenizer_json()
    (data / "tiny_tokenizer.json").write_text(dumps(tok), encoding="utf-8")
    make_spm_model(data / "tiny_spm.model")

    # safetensors
    put("safetensors", "three_tensors.safetensors", safetensors_bytes({
        "a.weight": ("F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
        "b.weight": ("BF16", [3], b"\x80\x3f" * 3),
        "c": ("I8", [1, 2, 1], b"\x01\xff")}, {"format": "pt"}))
    put("safetensors", "empty_and_scalar.safetensors", safetensors_bytes({
        "empty": ("F16", [0, 4], b""), "scalar": ("F64", [], struct.pack("<d", 0.25)),
        "bool": ("BOOL", [2], b"\x00\x01")}))
    put("safetensors", "header_only.safetensors", safetensors_bytes({}))
    # safetensors index (the fuzz target's directory holds these two shards)
    wm = {"embed.weight": "model-00001-of-00002.safetensors", "norm.weight": "model-00001-of-00002.safetensors",
          "layers.0.weight": "model-00002-of-00002.safetensors"}
    put("safetensors_index", "index.json", dumps({"metadata": {"total_size": 24}, "weight_map": wm}))
    put("safetensors_index", "index_dot_slash.json",
        dumps({"weight_map": {k: "./" + v for k, v in wm.items()}}))
    put("safetensors_index", "index_one_shard.json",
        dumps({"weight_map": {"layers.0.weight": "model-00002-of-00002.safetensors"}}))

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # GGUF
        tiny_gemma3_gguf(tmp / "tiny.gguf")
        put("gguf", "tiny_gemma3_1layer.gguf", (tmp / "tiny.gguf").read_bytes())
        gguf_all_value_types(tmp / "types.gguf")
        put("gguf", "all_value_types.gguf", (tmp / "types.gguf").read_bytes())
        for name, model, arch, merges in [("llama_gemma3", "llama", "gemma3", False),
                                          ("gemma4_merges", "gemma4", "gemma4", True)]:
            gguf_vocab_only(tmp / f"{name}.gguf", model, arch, merges)
            put("gguf_vocab", f"{name}.gguf", (tmp / f"{name}.gguf").read_bytes())

        # .litertlm, TFLite, LlmMetadata: Google's builders (tools/make_litertlm_fixtures.py)
        import make_litertlm_fixtures as lf
        spm_bytes = (data / "tiny_spm.model").read_bytes()
        lf.make_package(str(tmp), spm_bytes, str(tmp / "all.litertlm"))
        put("litertlm", "all_sections.litertlm", (tmp / "all.litertlm").read_bytes())
        put("litertlm", "hf_tokenizer.litertlm", (tmp / "all.litertlm.hf.litertlm").read_bytes())
        lf.make_v11_package(str(tmp / "v11.litertlm"))
        put("litertlm", "version_1_1.litertlm", (tmp / "v11.litertlm").read_bytes())
        put("tflite", "builder_model.tflite", lf.make_tflite())
        put("llm_metadata", "full.pb", lf.llm_metadata().SerializeToString())
        put("llm_metadata", "sentencepiece_model.pb", spm_bytes)
    fixtures = SHARED / "fixtures" / "litertlm"
    for name in ["small_hf_tokenizer.litertlm", "dummy_vision_with_adapter.litertlm", "dummy_audio_only.litertlm"]:
        if (fixtures / name).is_file():
            put("litertlm", name, (fixtures / name).read_bytes())
    if (fixtures / "tflite_external_kv_test_fixture.tflite").is_file():
        put("tflite", "external_kv.tflite", (fixtures / "tflite_external_kv_test_fixture.tflite").read_bytes())

    # tokenizer.json, SentencePiece
    put("hf_tokenizer", "tiny.json", dumps(tok))
    variant = json.loads(dumps(tok))
    variant["model"]["merges"] = ["b c", "a b", "a bc", "\u2581 a", "a a"]
    variant["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    variant["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": "\n"}, "behavior": "Isolated", "invert": False}]}
    variant["decoder"]["decoders"].append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    put("hf_tokenizer", "sequences_and_strip.json", dumps(variant))
    put("sentencepiece", "tiny.model", spm_bytes)

    # packed .lmp: a tiny Gemma 4 written by `lumen convert --synthetic` (q4 and bf16)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "config.json"
        smaller = tiny_gemma4_config()
        smaller.update({"hidden_size": 32, "intermediate_size": 32, "head_dim": 16, "global_head_dim": 32,
                        "vocab_size": 64, "vocab_size_per_layer_input": 64})
        cfg.write_text(dumps(smaller))
        for quant in ("q4", "bf16"):
            out = Path(tmp) / f"tiny-{quant}.lmp"
            subprocess.run([args.lumen, "convert", "--synthetic", str(cfg), str(out), "--quant", quant], check=True,
                           capture_output=True)
            put("packed", f"tiny_gemma4_{quant}.lmp", out.read_bytes())

    # config.json, manifests
    put("hf_config", "tiny_gemma4.json", dumps(tiny_gemma4_config()))
    put("hf_config", "tiny_gemma3.json", dumps(tiny_gemma3_config()))
    put("hf_config", "gemma4_wrapped.json", dumps({"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"],
                                                   "text_config": tiny_gemma4_config()}))
    put("hf_config", "gemma4_1b_class.json", (ROOT / "tools" / "configs" / "gemma-4-1b-class-shapes.json").read_text())
    manifest = SHARED / "manifests" / "litert-gemma-4-12b-it.json"
    if manifest.is_file():
        put("manifest", "litert_gemma4_12b.json", dumps(json.loads(manifest.read_text())))
        m = json.loads(manifest.read_text())
        m["runtime"]["manifestInference"].pop("unsupported", None)
        m["package"]["litertlm"].pop("unsupported", None)
        put("manifest", "litert_gemma4_12b_no_gate.json", dumps(m))

    # OpenAI requests: the first byte picks the endpoint (odd: chat, even: completions)
    chat = [
        {"messages": [{"role": "user", "content": "Hi"}]},
        {"model": "x", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                                    {"role": "assistant", "content": "Hello"}, {"role": "user", "content": [
                                        {"type": "text", "text": "again"}]}],
         "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 16, "temperature": 0.7,
         "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 7, "stop": ["\n", "END"], "presence_penalty": 0.5,
         "frequency_penalty": -0.5, "repetition_penalty": 1.1, "logit_bias": {"5": -100, "7": 2.5}, "n": 1},
        {"messages": [{"role": "developer", "content": "x"}, {"role": "user", "content": "y"}],
         "max_completion_tokens": 1, "stop": "s"},
    ]
    completion = [
        {"prompt": "Once upon a time", "max_tokens": 8},
        {"prompt": [2, 10, 11, 12], "temperature": 0, "stream": True},
        {"prompt": "x", "echo": False, "logprobs": None, "suffix": None, "seed": 1},
    ]
    for i, body in enumerate(chat):
        put("openai_request", f"chat{i}.bin", b"\x01" + dumps(body).encode())
    for i, body in enumerate(completion):
        put("openai_request", f"completion{i}.bin", b"\x00" + dumps(body).encode())

    # chat format (structured bytes: see tests/fuzz/fuzz_chat_format.cpp)
    def chat_seed(gemma4, gen, think, msgs, tok_index=0):
        out = bytes([gemma4, gen, think, len(msgs)])
        for role, content in msgs:
            out += bytes([role]) + content.encode() + b"\0"
        return out + bytes([tok_index])
    put("chat_format", "gemma4_system.bin", chat_seed(1, 1, 0, [(0, "Be brief."), (2, "Hi"), (3, "Hello"), (2, "More")]))
    put("chat_format", "gemma3_think.bin", chat_seed(0, 1, 1, [(2, "  padded  "), (4, "ok\n"), (2, "\u00e9t\u00e9")], 1))
    put("chat_format", "bad_order.bin", chat_seed(1, 0, 0, [(2, "a"), (0, "late system")], 2))

    # tokenizer round trip: selector byte, parse_special byte, then text
    for i, text in enumerate(["Hello world", "  two  spaces\n\nand\ttabs", "abcabc aab <bos> <|turn>",
                              "\u00e9t\u00e9 \u2581 \U0001F642 \u65e5\u672c\u8a9e", "\x00\x01\x7f"]):
        for sel in range(3):
            put("tokenizer_roundtrip", f"text{i}_{sel}.bin", bytes([sel, i & 1]) + text.encode())
    put("tokenizer_roundtrip", "invalid_utf8.bin", b"\x00\x00abc\xff\xfe\xc3")

    # dictionaries
    write_dict("gguf", literals(["src/spec/gguf_spec.cpp", "src/formats/gguf.cpp", "src/spec/spec_common.cpp"])
               + ["gemma3.", "blk.0.", "tokenizer.ggml.", "general.architecture", "general.alignment"],
               raw=[b"GGUF", b"\x03\x00\x00\x00", b"\x08\x00\x00\x00", b"\x09\x00\x00\x00"])
    write_dict("gguf_vocab", literals(["src/tokenizer/gguf_tokenizer.cpp", "src/formats/gguf.cpp"])
               + ["tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type", "\u2581", "<0x0A>"],
               raw=[b"GGUF", b"\x08\x00\x00\x00", b"\x09\x00\x00\x00"])
    json_dict("safetensors", ["src/formats/safetensors.cpp", "src/base/dtype.h"])
    json_dict("safetensors_index", ["src/formats/safetensors.cpp"])
    json_dict("hf_config", ["src/spec/hf_config*.cpp", "src/spec/spec_common.cpp"])
    json_dict("manifest", ["src/spec/manifest.cpp", "src/runtime/manifest_fields.cpp", "src/kv/kv_config.cpp"])
    json_dict("openai_request", ["src/server/openai_api.cpp"])
    json_dict("hf_tokenizer", ["src/tokenizer/hf_tokenizer.cpp"])
    json_dict("packed", ["src/formats/packed.cpp", "src/spec/hf_config.cpp", "src/quant/*.cpp"])
    write_dict("litertlm", literals(["src/formats/litertlm.cpp", "src/spec/litert_map.cpp"]),
               raw=[b"LITERTLM", b"TFL3", b"\x01\x00\x00\x00", b"\x09"])
    write_dict("tflite", [], raw=[b"TFL3", b"\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x04\x00", b"\x08\x00"])

    total = sum(f.stat().st_size for f in (FUZZ / "corpus").rglob("*") if f.is_file())
    print(f"corpora: {total} bytes in {sum(1 for f in (FUZZ / 'corpus').rglob('*') if f.is_file())} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
