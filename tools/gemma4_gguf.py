#!/usr/bin/env python3
"""Gemma 4 GGUF files as llama.cpp's converter writes them, from tiny Hugging Face checkpoints.

    gemma4_gguf.py convert HF_DIR OUT.gguf [--outtype f32|f16|bf16|q8_0]
    gemma4_gguf.py quantize IN_F32.gguf OUT.gguf --type Q4_K_M      (needs llama-cpp-python)
    gemma4_gguf.py dequantize IN.gguf HF_DIR OUT_DIR                 (the f32 checkpoint transformers runs)
    gemma4_gguf.py dequantize-gguf IN.gguf OUT.gguf                   (the same numbers as an F32 GGUF)
    gemma4_gguf.py tokenizer HF_DIR                                  (adds a tiny Gemma 4 tokenizer)

`convert` follows llama.cpp's `convert_hf_to_gguf.py` (conversion/gemma.py Gemma4Model and the
TextModel base it extends, llama-cpp-python 0.3.36's vendored copy) key for key:
  - gemma4.* metadata: block_count, context_length, embedding_length, feed_forward_length,
    attention.head_count, attention.head_count_kv (one value per layer when the full layers
    have their own KV head count), rope.freq_base (full layers) and rope.freq_base_swa,
    attention.layer_norm_rms_epsilon, attention.key_length/value_length (full layers' head dim)
    and their _swa twins, final_logit_softcapping, attention.sliding_window,
    attention.shared_kv_layers, embedding_length_per_layer_input, attention.sliding_window_pattern
    (one BOOL per layer, true = sliding), rope.dimension_count (the full head dim) and
    rope.dimension_count_swa; general.file_type;
  - tensors named by gguf-py's TensorNameMap for MODEL_ARCH.GEMMA4 (`layer_scalar` becomes
    blk.N.layer_output_scale), plus `rope_freqs` = [1] * rotated pairs + [1e30] * the rest of
    the full layers' head_dim/2 pairs (proportional RoPE as per-pair frequency factors);
    1-D tensors and *_norm.weight stay F32, the matrices take the output type; norm gains as
    stored (Gemma 4 has no "+1");
  - the vocabulary through gguf-py's LlamaHfVocab and SpecialVocab (merges, special ids, the
    chat template), tokenizer model "gemma4", add_bos true, the converter's USER_DEFINED
    channel/tool tokens.
The quantized types (Q4_0 ... Q6_K, IQ4_NL, IQ4_XS and the _S/_M mixes) come from llama.cpp's own
quantizer (`llama_cpp.llama_model_quantize`) run on the F32 file, as users make them.

`dequantize` writes the checkpoint transformers runs on exactly the GGUF's numbers: every tensor
dequantized by gguf-py's ggml arithmetic, named back to the HF names, f32, with HF_DIR's
config.json. Outputs are written to a temporary name and renamed.

Python is for tests and tools only; the engine never imports this.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

try:
    import gguf
    from gguf import GGMLQuantizationType as Q
except ImportError as e:  # pragma: no cover - a setup problem, said plainly
    sys.exit(f"gemma4_gguf.py needs gguf (pip install gguf==0.19.0): {e}")

# The converter's output types (convert_hf_to_gguf.py --outtype) and their ggml file types.
OUTTYPES = {
    "f32": (Q.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (Q.F16, gguf.LlamaFileType.MOSTLY_F16),
    "bf16": (Q.BF16, gguf.LlamaFileType.MOSTLY_BF16),
    "q8_0": (Q.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
}
# llama.cpp's quantization presets (llama_ftype), as llama-quantize names them.
QUANT_FTYPES = {
    "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12,
    "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25,
    "IQ4_XS": 30,
}
# The tokens the converter marks USER_DEFINED so that they always render (Gemma4Model.set_vocab).
VISIBLE_TOKENS = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
                  "<tool_response|>", "<|\"|>"}
PASS_THROUGH = 1e30  # the converter's rope_freqs factor for the unrotated pairs


def _fail(msg: str) -> None:
    print(f"gemma4_gguf: error: {msg}", file=sys.stderr)
    sys.exit(1)


def text_hparams(hf_dir: Path) -> dict:
    """The text config as the converter sees it: AutoConfig's to_dict() (defaults filled in),
    the text_config of a multimodal wrapper."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(hf_dir, trust_remote_code=False).to_dict()
    return cfg.get("text_config", cfg)


def _full_layer_value(hp: dict, key: str, global_key: str):
    """global_head_dim / num_global_key_value_heads, or the first full layer's per_layer_config
    entry (the converter's fallback)."""
    value = hp.get(global_key)
    plc = hp.get("per_layer_config")
    if value is None and plc is not None:
        types = hp.get("layer_types", [])
        for idx, layer_config in plc.items():
            idx = int(idx)
            if idx < len(types) and types[idx] == "full_attention" and key in layer_config:
                return layer_config[key]
    return value


def rope_freqs(hp: dict) -> np.ndarray:
    """[1] * rotated pairs + [1e30] * the rest: the full layers' proportional RoPE."""
    full = hp["rope_parameters"]["full_attention"]
    assert full["rope_type"] == "proportional", full
    head_dim_full = _full_layer_value(hp, "head_dim", "global_head_dim")
    n_rot = int(head_dim_full * full["partial_rotary_factor"] / 2)
    return np.array([1.0] * n_rot + [PASS_THROUGH] * (head_dim_full // 2 - n_rot), dtype=np.float32)


def write_metadata(w, hp: dict, file_type) -> None:
    """The gemma4.* keys in the converter's order (TextModel, Gemma3Model, Gemma4Model)."""
    n_layers = hp["num_hidden_layers"]
    rope = hp.get("rope_parameters") or {}
    full_rope = rope.get("full_attention", rope)
    # TextModel.set_gguf_parameters
    w.add_block_count(n_layers)
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(hp["num_attention_heads"])
    w.add_head_count_kv(hp["num_key_value_heads"])
    if full_rope.get("rope_theta") is not None:
        w.add_rope_freq_base(full_rope["rope_theta"])
    if rope.get("sliding_attention", {}).get("rope_theta") is not None:
        w.add_rope_freq_base_swa(rope["sliding_attention"]["rope_theta"])
    w.add_layer_norm_rms_eps(hp["rms_norm_eps"])
    if hp.get("num_experts") is not None:
        w.add_expert_count(hp["num_experts"])
    if hp.get("top_k_experts") is not None:
        w.add_expert_used_count(hp["top_k_experts"])
    w.add_key_length(hp["head_dim"])
    w.add_value_length(hp["head_dim"])
    w.add_file_type(file_type)
    # Gemma3Model.set_gguf_parameters (its key_length / head_count_kv are overwritten below)
    if hp.get("final_logit_softcapping"):
        w.add_final_logit_softcapping(hp["final_logit_softcapping"])
    if hp.get("sliding_window_pattern") != 1:
        w.add_sliding_window(hp["sliding_window"])
    # Gemma4Model.set_gguf_parameters
    w.add_shared_kv_layers(hp["num_kv_shared_layers"])
    w.add_embedding_length_per_layer_input(hp.get("hidden_size_per_layer_input") or 0)
    swa_layers = [t == "sliding_attention" for t in hp["layer_types"]]
    w.add_sliding_window_pattern(swa_layers)
    head_dim_full = _full_layer_value(hp, "head_dim", "global_head_dim")
    head_dim_swa = hp["head_dim"]
    w.add_key_length(head_dim_full)
    w.add_value_length(head_dim_full)
    w.add_key_length_swa(head_dim_swa)
    w.add_value_length_swa(head_dim_swa)
    if hp.get("moe_intermediate_size") is not None:
        w.add_expert_feed_forward_length(hp["moe_intermediate_size"])
    if hp.get("use_double_wide_mlp"):
        first_shared = n_layers - hp["num_kv_shared_layers"]
        n_ff = hp["intermediate_size"]
        w.add_feed_forward_length([n_ff if i < first_shared else 2 * n_ff for i in range(n_layers)])
    kv_full = _full_layer_value(hp, "num_key_value_heads", "num_global_key_value_heads")
    kv_swa = hp.get("num_key_value_heads")
    if kv_full is not None and kv_swa is not None:
        w.add_head_count_kv([kv_swa if swa else kv_full for swa in swa_layers])
    partial_swa = rope.get("partial_rotary_factor", 1.0)  # the dict is keyed by layer type: always 1
    w.add_rope_dimension_count(int(head_dim_full))
    w.add_rope_dimension_count_swa(int(head_dim_swa * partial_swa))


def write_vocab(w, hf_dir: Path) -> int:
    """Gemma4Model.set_vocab."""
    vocab = gguf.LlamaHfVocab(hf_dir)
    tokens, scores, toktypes = [], [], []
    for text, score, toktype in vocab.all_tokens():
        tokens.append(text)
        scores.append(score)
        toktypes.append(gguf.TokenType.USER_DEFINED if text.decode() in VISIBLE_TOKENS else toktype)
    assert len(tokens) == vocab.vocab_size
    w.add_tokenizer_model("gemma4")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(toktypes)
    gguf.SpecialVocab(hf_dir, load_merges=True).add_to_gguf(w)
    w.add_add_space_prefix(False)
    w.add_add_bos_token(True)
    return len(tokens)


def hf_tensors(hf_dir: Path):
    """(name, float32 array) of every stored tensor, HF names without the wrapper's prefix."""
    from safetensors.numpy import load_file  # noqa: F401  (bf16 needs torch below)
    import torch
    from safetensors import safe_open

    for f in sorted(hf_dir.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for name in st.keys():
                t = st.get_tensor(name).to(torch.float32).numpy()
                yield name.replace("model.language_model.", "model."), t


def gguf_name(name_map, name: str) -> str:
    if name.endswith("layer_scalar"):  # Gemma4Model.filter_tensors
        name += ".weight"
    new = name_map.get_name(name, try_suffixes=(".weight", ".bias"))
    if new is None:
        _fail(f"tensor {name}: no GGUF name for it")
    return new


class Prepared:
    """What the converter would write: metadata (key -> (value, type, sub_type), in order) and
    tensors (name -> (float32 array, ggml type)). Tests edit copies to make broken files."""

    def __init__(self, kv: dict, tensors: dict):
        self.kv = kv
        self.tensors = tensors

    def copy(self) -> "Prepared":
        return Prepared(dict(self.kv), dict(self.tensors))


def prepare(hf_dir, outtype: str = "f32") -> Prepared:
    """HF checkpoint -> the keys and tensors convert_hf_to_gguf.py --outtype OUTTYPE writes."""
    hf_dir = Path(hf_dir)
    if outtype not in OUTTYPES:
        _fail(f"--outtype {outtype!r}: expected one of {', '.join(OUTTYPES)}")
    qtype, file_type = OUTTYPES[outtype]
    hp = text_hparams(hf_dir)
    w = gguf.GGUFWriter(None, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GEMMA4])
    w.add_name(hf_dir.name)
    write_metadata(w, hp, file_type)
    n_vocab = write_vocab(w, hf_dir)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    kv = {k: (v.value, v.type, v.sub_type) for k, v in w.kv_data[0].items()}

    name_map = gguf.TensorNameMap(gguf.MODEL_ARCH.GEMMA4, hp["num_hidden_layers"])
    table = {gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight": (rope_freqs(hp), Q.F32)}
    for name, data in hf_tensors(hf_dir):
        new = gguf_name(name_map, name)
        if new == "token_embd.weight":
            data = data[:n_vocab]  # Gemma3Model.modify_tensors: out-of-vocabulary rows removed
        t = Q.F32 if data.ndim <= 1 or new.endswith("_norm.weight") else qtype
        table[new] = (data, t)
    return Prepared(kv, table)


def write(prepared: Prepared, out_path) -> Path:
    """Writes the file (to OUT.tmp, then renamed). Tensors of a block type are quantized by
    gguf-py; a tensor given as raw uint8 bytes is written as they are (broken-file tests)."""
    out_path = Path(out_path)
    tmp = out_path.with_name(out_path.name + ".tmp")
    arch = prepared.kv.get("general.architecture", ("gemma4",))[0]
    w = gguf.GGUFWriter(str(tmp), arch)
    for k, entry in prepared.kv.items():
        if k == "general.architecture":
            continue
        value, vtype = entry[0], entry[1]
        sub_type = entry[2] if len(entry) > 2 else None
        if vtype == gguf.GGUFValueType.ARRAY and sub_type is None:
            sub_type = _array_type(value)
        w.add_key_value(k, value, vtype, sub_type=sub_type)
    for name, (data, t) in prepared.tensors.items():
        if data.dtype == np.uint8:
            w.add_tensor(name, data, raw_dtype=t)
        elif t in (Q.F32, Q.F16):
            w.add_tensor(name, data.astype(np.float32 if t == Q.F32 else np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(data.astype(np.float32), t), raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out_path)
    return out_path


def convert(hf_dir, out_path, outtype: str = "f32") -> Path:
    """HF checkpoint -> GGUF as convert_hf_to_gguf.py --outtype OUTTYPE writes it."""
    return write(prepare(hf_dir, outtype), out_path)


def _array_type(value):
    if value and isinstance(value[0], bool):
        return gguf.GGUFValueType.BOOL
    if value and isinstance(value[0], int):
        return gguf.GGUFValueType.INT32
    if value and isinstance(value[0], float):
        return gguf.GGUFValueType.FLOAT32
    return gguf.GGUFValueType.STRING


def quantize(src, dst, qtype: str, threads: int = 2) -> Path:
    """llama.cpp's quantizer (llama-quantize) on an F32/F16/BF16 file."""
    import llama_cpp
    from llama_cpp import _logger

    _logger.set_verbose(False)  # llama.cpp's per-tensor log lines: errors only
    if qtype not in QUANT_FTYPES:
        _fail(f"--type {qtype!r}: expected one of {', '.join(QUANT_FTYPES)}")
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".tmp")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANT_FTYPES[qtype]
    params.nthread = threads
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), params)
    if rc != 0:
        _fail(f"llama_model_quantize {src} -> {qtype} failed ({rc})")
    os.replace(tmp, dst)
    return dst


HF_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}


def dequantized_tensors(gguf_path) -> dict:
    """GGUF name -> float32 array (row-major, HF layout), dequantized by gguf-py."""
    reader = gguf.GGUFReader(str(gguf_path))
    out = {}
    for t in reader.tensors:
        shape = [int(x) for x in reversed(t.shape.tolist())]
        out[t.name] = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
    return out


def dequantize(gguf_path, hf_dir, out_dir) -> Path:
    """The f32 HF checkpoint of exactly the GGUF's numbers (config.json from hf_dir)."""
    import torch
    from safetensors.torch import save_file

    hf_dir, out_dir = Path(hf_dir), Path(out_dir)
    tensors = {}
    for name, data in dequantized_tensors(gguf_path).items():
        if name == "rope_freqs.weight":
            continue  # derived from the config, not a checkpoint tensor
        if name == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            hf = "model.norm.weight"
        elif name == "output.weight":
            hf = "lm_head.weight"
        else:
            blk, layer, rest = name.split(".", 2)
            base = rest[: -len(".weight")]
            if base == "layer_output_scale":
                hf = f"model.layers.{layer}.layer_scalar"
            else:
                hf = f"model.layers.{layer}.{HF_NAMES[base]}.weight"
        tensors[hf] = torch.from_numpy(np.array(data, dtype=np.float32, copy=True))
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((hf_dir / "config.json").read_text())
    cfg["dtype"] = "float32"
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)
    return out_dir


def read_prepared(src) -> Prepared:
    """Any GGUF file as a Prepared: its metadata (general.file_type ALL_F32) and every tensor
    dequantized by gguf-py to F32 (exactly the file's numbers, 3-D expert stacks included), to
    write again as it is or edited."""
    reader = gguf.GGUFReader(str(src))
    kv = {}
    for k, f in reader.fields.items():
        if k.startswith("GGUF."):
            continue
        vtype = f.types[0]
        sub_type = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        kv[k] = (f.contents(), vtype, sub_type)
    kv["general.file_type"] = (int(gguf.LlamaFileType.ALL_F32), gguf.GGUFValueType.UINT32, None)
    tensors = {}
    for t in reader.tensors:
        shape = [int(x) for x in reversed(t.shape.tolist())]
        data = np.asarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        tensors[t.name] = (data, Q.F32)
    return Prepared(kv, tensors)


def dequantize_gguf(src, out_path) -> Path:
    """src's numbers as an F32 GGUF (read_prepared, written)."""
    return write(read_prepared(src), out_path)


# ---------------------------------------------------------------------------------------------
# A tiny Gemma 4 style tokenizer (tokenizer.json + tokenizer_config.json) for tiny checkpoints.

# Gemma 4's control and markup tokens at their real ids (../shared/docs/GEMMA4.md).
SPECIAL_IDS = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>", 46: "<|tool>", 47: "<tool|>",
               48: "<|tool_call>", 49: "<tool_call|>", 50: "<|tool_response>", 51: "<tool_response|>",
               52: "<|\"|>", 98: "<|think|>", 100: "<|channel>", 101: "<channel|>", 105: "<|turn>",
               106: "<turn|>"}
NEWLINE_ID = 107
FIRST_BYTE_ID = 108
# The text the merges are learned from (deterministic; any English text would do).
MERGE_CORPUS = (
    "The quick brown fox jumps over the lazy dog. What is the capital of France? Paris is the "
    "capital of France. In the beginning God created the heaven and the earth. And the earth was "
    "without form, and void; and darkness was upon the face of the deep. Hello, how are you today? "
    "I am fine, thank you. The model answers the question in one sentence. Then the model thinks "
    "about the answer before it writes the answer, and the answer is the thing the user wanted. "
    "There are three things in the world that the model knows: the sea, the sky and the stars. "
)
GEMMA4_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- set has_system = messages and messages[0]['role'] in ['system', 'developer'] -%}"
    "{%- set rest = messages[1:] if has_system else messages -%}"
    "{%- if enable_thinking or has_system -%}"
    "{{ '<|turn>system\\n' }}{%- if enable_thinking -%}{{ '<|think|>\\n' }}{%- endif -%}"
    "{%- if has_system -%}{{ messages[0]['content'] | trim }}{%- endif -%}"
    "{{ '<turn|>\\n' }}"
    "{%- endif -%}"
    "{%- for m in rest -%}"
    "{{ '<|turn>' + ('model' if m['role'] in ['assistant', 'model'] else m['role']) + '\\n' }}"
    "{{ m['content'] | trim }}{{ '<turn|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|turn>model\\n' }}"
    "{%- if not enable_thinking -%}{{ '<|channel>thought\\n<channel|>' }}{%- endif -%}{%- endif -%}"
)


def _learn_merges(text: str, budget: int) -> tuple[list[str], list[tuple[str, str]]]:
    """Characters of the text, then `budget` byte-pair merges over it, most frequent first
    (ties: the lexicographically smallest pair), with no word boundaries (Gemma's BPE)."""
    seq = list(text.replace(" ", "\u2581"))
    alphabet = sorted(set(seq))
    merges = []
    budget -= len(alphabet)
    while budget > 0:
        counts: dict = {}
        for a, b in zip(seq, seq[1:]):
            if "\n" not in a + b:
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        if counts[best] < 2:
            break
        merges.append(best)
        merged, i = [], 0
        while i < len(seq):
            if i + 1 < len(seq) and (seq[i], seq[i + 1]) == best:
                merged.append(seq[i] + seq[i + 1])
                i += 2
            else:
                merged.append(seq[i])
                i += 1
        seq = merged
        budget -= 1
    return alphabet, merges


def write_tokenizer(hf_dir, vocab_size: int | None = None) -> None:
    """tokenizer.json / tokenizer_config.json of `vocab_size` (default: config.json's) entries:
    Gemma 4's special ids, "\\n" at 107, byte fallback <0x00>.. from 108, then characters and
    merges learned from MERGE_CORPUS, padded with <unusedN>."""
    hf_dir = Path(hf_dir)
    if vocab_size is None:
        cfg = json.loads((hf_dir / "config.json").read_text())
        vocab_size = cfg.get("text_config", cfg)["vocab_size"]
    first_free = FIRST_BYTE_ID + 256
    if vocab_size < first_free + 64:
        _fail(f"vocab_size {vocab_size} is too small for the tiny Gemma 4 tokenizer (>= {first_free + 64})")
    vocab: dict[str, int] = {}
    unused = 0
    for i in range(FIRST_BYTE_ID):
        if i in SPECIAL_IDS:
            vocab[SPECIAL_IDS[i]] = i
        elif i == NEWLINE_ID:
            vocab["\n"] = i
        else:
            vocab[f"<unused{unused}>"] = i
            unused += 1
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = FIRST_BYTE_ID + b
    alphabet, merges = _learn_merges(MERGE_CORPUS, vocab_size - first_free)
    for tok in alphabet + [a + b for a, b in merges]:
        if tok not in vocab:
            vocab[tok] = len(vocab)
    while len(vocab) < vocab_size:
        vocab[f"<unused{unused}>"] = len(vocab)
        unused += 1
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for t, i in sorted(vocab.items(), key=lambda kv: kv[1])
             if i < FIRST_BYTE_ID and i != NEWLINE_ID or t.startswith("<unused")]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                          "invert": False},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<bos>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    config = {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
              "mask_token": "<mask>",
              # Gemma 4's markup tokens are special (CONTROL in the GGUF; the converter turns
              # the channel / tool ones into USER_DEFINED so that they render).
              "extra_special_tokens": [SPECIAL_IDS[i] for i in sorted(SPECIAL_IDS) if i > 4],
              "add_bos_token": True, "add_eos_token": False, "tokenizer_class": "GemmaTokenizer",
              "model_max_length": 1000000, "chat_template": GEMMA4_CHAT_TEMPLATE}
    (hf_dir / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False, indent=1) + "\n",
                                           encoding="utf-8")
    (hf_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("hf_dir")
    c.add_argument("out")
    c.add_argument("--outtype", default="f32", choices=list(OUTTYPES))
    q = sub.add_parser("quantize")
    q.add_argument("src")
    q.add_argument("dst")
    q.add_argument("--type", required=True, choices=list(QUANT_FTYPES))
    q.add_argument("--threads", type=int, default=2)
    d = sub.add_parser("dequantize")
    d.add_argument("gguf")
    d.add_argument("hf_dir")
    d.add_argument("out_dir")
    dg = sub.add_parser("dequantize-gguf")
    dg.add_argument("gguf")
    dg.add_argument("out")
    t = sub.add_parser("tokenizer")
    t.add_argument("hf_dir")
    a = ap.parse_args(argv)
    if a.cmd == "convert":
        print(convert(a.hf_dir, a.out, a.outtype))
    elif a.cmd == "quantize":
        print(quantize(a.src, a.dst, a.type, a.threads))
    elif a.cmd == "dequantize":
        print(dequantize(a.gguf, a.hf_dir, a.out_dir))
    elif a.cmd == "dequantize-gguf":
        print(dequantize_gguf(a.gguf, a.out))
    else:
        write_tokenizer(a.hf_dir)
        print(Path(a.hf_dir) / "tokenizer.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
