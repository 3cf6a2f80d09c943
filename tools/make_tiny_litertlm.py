#!/usr/bin/env python3
"""Tiny Gemma 4 LiteRT-LM packages written by hand, from a safetensors checkpoint.

    make_tiny_litertlm.py --checkpoint DIR --out OUTDIR

Google's converter cannot write these cases here (no Gemma 4 builder for a tiny config, no way
to drop a layer or swap constants), so this tool writes the packages itself with the `tflite`
package's generated FlatBuffer builders and litert-lm-builder's container writer. Every
projection matrix and the embedding are quantized once, by one policy, and every package is
made from those same quantized tensors:

  q/k/v/o_proj  INT4, fixed scale 0.0625, offset binary: w = (nibble - 8) * 0.0625, low nibble
                first (per-tensor quantization scale [0.0625], zero point [8]; in the unnamed
                package the INT4 constants carry NO quantization parameters and the map file
                declares the fixed scale instead)
  gate_proj     INT4 per-channel, zero point 8, scales rounded to f16 (maps 1:1 to Q4_0)
  up_proj       INT4 per-channel, zero point 0 (two's complement nibbles), scales NOT f16
                values (Lumen cannot keep them as Q4_0: it expands them to f32)
  down_proj,    INT8 per-channel, zero point 0, scales rounded to f16 (maps 1:1 to Q8_0)
  embed_tokens
  per-layer inputs (E2B/E4B): per_layer_input_gate as gate_proj; per_layer_projection,
                per_layer_model_projection and the table embed_tokens_per_layer as down_proj
  norms, q/k norm gains, layer_scalar: FLOAT32

A checkpoint with per-layer inputs gets the E2B/E4B package layout: the decoder's constants in
the tf_lite_prefill_decode section, embed_tokens in a tf_lite_embedder section and the
per-layer table in a tf_lite_per_layer_embedder section (KV-shared layers simply have no k/v
constants, as in the checkpoint). Mixture-of-experts checkpoints are refused.

Outputs in OUTDIR:
  tiny.litertlm               constants named like the checkpoint (model.layers.N.<role>.weight)
  tiny-unnamed.litertlm       the same constants named arith.constantN, in a shuffled order
  tiny-unnamed.map.json       its lumen.litert-map/v1 map (constant index -> layer, role)
  tiny-fused.litertlm         sliding layers' q/k/v stored as one qkv_proj constant
  tiny-swapped.litertlm       layer 1's gate_proj and up_proj constants swapped (names kept)
  tiny-missing-layer.litertlm layer 3 dropped, later groups renumbered (as the 12B package's
                              47 groups for 48 layers)
  tiny-manifest.json          a doppler.execution/v1 manifest of the model whose
                              package.litertlm carries an `unsupported` block
  source-q/                   the "source after the same quantization": config.json and a
                              float32 model.safetensors holding exactly the dequantized values
                              (what `lumen verify --against` compares with)
  tokenizer.model             the SentencePiece model in the packages' SP_Tokenizer sections

Test tool only (Python is never on Lumen's run path).
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import flatbuffers
import numpy as np
import tflite
from litert_lm_builder import litertlm_builder as lb
from litert_lm_builder.runtime.proto import llm_metadata_pb2
from safetensors.numpy import load_file, save_file

FIXED_SCALE = 0.0625
MISSING_LAYER = 3
SWAP_LAYER = 1

# ---------------------------------------------------------------------------- quantization


def quant_fixed_int4(w):
    k = np.clip(np.rint(w / FIXED_SCALE), -8, 7).astype(np.int8)
    return dict(kind="fixed", k=k, nibbles=(k + 8).astype(np.uint8),
                deq=k.astype(np.float32) * np.float32(FIXED_SCALE))


def quant_per_channel_int4(w, zero_point, f16_scales):
    s = np.abs(w).max(axis=1) / 7.0
    s = np.where(s == 0, 1.0, s).astype(np.float32)
    if f16_scales:
        s = s.astype(np.float16).astype(np.float32)
    k = np.clip(np.rint(w / s[:, None]), -8, 7).astype(np.int8)
    nibbles = (k + 8).astype(np.uint8) if zero_point == 8 else (k.astype(np.uint8) & 0xF)
    return dict(kind="pc4", zero_point=zero_point, scales=s, k=k, nibbles=nibbles,
                deq=k.astype(np.float32) * s[:, None])


def quant_per_channel_int8(w):
    s = (np.abs(w).max(axis=1) / 127.0)
    s = np.where(s == 0, 1.0, s).astype(np.float16).astype(np.float32)
    k = np.clip(np.rint(w / s[:, None]), -127, 127).astype(np.int8)
    return dict(kind="int8", scales=s, k=k, deq=k.astype(np.float32) * s[:, None])


def pack_nibbles(nibbles):
    flat = nibbles.reshape(-1)
    assert flat.size % 2 == 0
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8).tobytes()  # low nibble first


def quantize(name, w):
    """The one quantization policy; returns a dict with `deq` (float32) and storage facts."""
    w = w.astype(np.float32)
    if w.ndim == 2:
        role = name.rsplit(".", 2)[-2]
        if role in ("q_proj", "k_proj", "v_proj", "o_proj"):
            return quant_fixed_int4(w)
        if role == "gate_proj":
            return quant_per_channel_int4(w, 8, True)
        if role == "up_proj":
            return quant_per_channel_int4(w, 0, False)
        if role in ("down_proj", "embed_tokens"):
            return quant_per_channel_int8(w)
        if role == "per_layer_input_gate":
            return quant_per_channel_int4(w, 8, True)
        if role in ("per_layer_projection", "per_layer_model_projection", "embed_tokens_per_layer"):
            return quant_per_channel_int8(w)
        raise ValueError(f"no quantization rule for {name}")
    if w.ndim > 2:
        raise ValueError(f"{name}: mixture-of-experts tensors have no LiteRT package layout here")
    return dict(kind="f32", deq=w)


# The package section a constant lives in (E2B/E4B layout; one section without per-layer inputs).
SECTIONS = [("decoder", "PREFILL_DECODE"), ("embedder", "EMBEDDER"), ("per_layer_embedder", "PER_LAYER_EMBEDDER")]


def section_of(name, split):
    if not split:
        return "decoder"
    if name.endswith("embed_tokens_per_layer.weight"):
        return "per_layer_embedder"
    if name.endswith("embed_tokens.weight"):
        return "embedder"
    return "decoder"


def layer_of(name):
    parts = name.split(".")
    return int(parts[parts.index("layers") + 1]) if "layers" in parts else None


def with_layer(name, layer):
    parts = name.split(".")
    parts[parts.index("layers") + 1] = str(layer)
    return ".".join(parts)


# ---------------------------------------------------------------------------- TFLite


class Constant:
    """One TFLite constant: name, TensorType, shape, raw bytes, quantization or None, section."""

    def __init__(self, name, ttype, shape, data, quant=None, section="decoder"):
        self.name, self.ttype, self.shape, self.data, self.quant = name, ttype, list(shape), data, quant
        self.section = section


def constant_from(name, q, fixed_params=True, section="decoder"):
    if q["kind"] == "fixed":
        quant = ([FIXED_SCALE], [8], 0) if fixed_params else None
        return Constant(name, tflite.TensorType.INT4, q["k"].shape, pack_nibbles(q["nibbles"]), quant, section)
    if q["kind"] == "pc4":
        rows = q["k"].shape[0]
        return Constant(name, tflite.TensorType.INT4, q["k"].shape, pack_nibbles(q["nibbles"]),
                        (q["scales"].tolist(), [q["zero_point"]] * rows, 0), section)
    if q["kind"] == "int8":
        rows = q["k"].shape[0]
        return Constant(name, tflite.TensorType.INT8, q["k"].shape, q["k"].tobytes(),
                        (q["scales"].tolist(), [0] * rows, 0), section)
    return Constant(name, tflite.TensorType.FLOAT32, q["deq"].shape, q["deq"].astype("<f4").tobytes(), None, section)


def tflite_bytes(constants):
    """A model of one subgraph holding the constants (inline buffers), plus a tokens input and a
    logits output so the file looks like what it is; no operators (Lumen reads weights only)."""
    b = flatbuffers.Builder(1 << 20)
    buffers = []
    tflite.BufferStart(b)
    buffers.append(tflite.BufferEnd(b))  # buffer 0: the empty sentinel
    for c in constants:
        vec = b.CreateByteVector(c.data)
        tflite.BufferStart(b)
        tflite.BufferAddData(b, vec)
        buffers.append(tflite.BufferEnd(b))

    def ints(start, values, prepend):
        start(b, len(values))
        for v in reversed(values):
            prepend(v)
        return b.EndVector()

    tensors = []
    io = [("tokens", tflite.TensorType.INT32, [1, 1]), ("logits", tflite.TensorType.FLOAT32, [1, 1, 1])]
    for i, c in enumerate(constants):
        nm = b.CreateString(c.name)
        shp = ints(tflite.TensorStartShapeVector, c.shape, b.PrependInt32)
        q = None
        if c.quant is not None:
            scales, zps, dim = c.quant
            sv = ints(tflite.QuantizationParametersStartScaleVector, scales, b.PrependFloat32)
            zv = ints(tflite.QuantizationParametersStartZeroPointVector, zps, b.PrependInt64)
            tflite.QuantizationParametersStart(b)
            tflite.QuantizationParametersAddScale(b, sv)
            tflite.QuantizationParametersAddZeroPoint(b, zv)
            tflite.QuantizationParametersAddQuantizedDimension(b, dim)
            q = tflite.QuantizationParametersEnd(b)
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shp)
        tflite.TensorAddType(b, c.ttype)
        tflite.TensorAddBuffer(b, i + 1)
        tflite.TensorAddName(b, nm)
        if q is not None:
            tflite.TensorAddQuantization(b, q)
        tensors.append(tflite.TensorEnd(b))
    for name, ttype, shape in io:
        nm = b.CreateString(name)
        shp = ints(tflite.TensorStartShapeVector, shape, b.PrependInt32)
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shp)
        tflite.TensorAddType(b, ttype)
        tflite.TensorAddName(b, nm)
        tensors.append(tflite.TensorEnd(b))

    tflite.SubGraphStartTensorsVector(b, len(tensors))
    for t in reversed(tensors):
        b.PrependUOffsetTRelative(t)
    tv = b.EndVector()
    n = len(constants)
    iv = ints(tflite.SubGraphStartInputsVector, [n], b.PrependInt32)
    ov = ints(tflite.SubGraphStartOutputsVector, [n + 1], b.PrependInt32)
    sg_name = b.CreateString("decode")
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, tv)
    tflite.SubGraphAddInputs(b, iv)
    tflite.SubGraphAddOutputs(b, ov)
    tflite.SubGraphAddName(b, sg_name)
    sg = tflite.SubGraphEnd(b)

    tflite.ModelStartBuffersVector(b, len(buffers))
    for x in reversed(buffers):
        b.PrependUOffsetTRelative(x)
    bv = b.EndVector()
    tflite.ModelStartSubgraphsVector(b, 1)
    b.PrependUOffsetTRelative(sg)
    sv = b.EndVector()
    desc = b.CreateString("Lumen tiny Gemma 4 (hand-written constants)")
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddSubgraphs(b, sv)
    tflite.ModelAddDescription(b, desc)
    tflite.ModelAddBuffers(b, bv)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


# ---------------------------------------------------------------------------- package


def sentencepiece_model(out_dir: Path, vocab: int) -> Path:
    """A byte-fallback BPE SentencePiece model with Gemma's special ids, trained by spm_train."""
    spm_train = shutil.which("spm_train")
    if not spm_train:
        raise SystemExit("spm_train is missing (Debian's sentencepiece package)")
    corpus = out_dir / "spm-corpus.txt"
    texts = []
    for lic in ("GPL-3", "Apache-2.0", "LGPL-2.1", "MPL-2.0"):
        p = Path("/usr/share/common-licenses") / lic
        if p.exists():
            texts.append(p.read_text(errors="replace"))
    if not texts:
        texts = ["the quick brown fox jumps over the lazy dog. " * 200]
    corpus.write_text("\n".join(texts))
    prefix = out_dir / "tokenizer"
    cp = subprocess.run([spm_train, f"--input={corpus}", f"--model_prefix={prefix}", f"--vocab_size={vocab}",
                         "--model_type=bpe", "--byte_fallback=true", "--character_coverage=1.0",
                         "--pad_id=0", "--eos_id=1", "--bos_id=2", "--unk_id=3", "--hard_vocab_limit=false",
                         "--num_threads=1", "--minloglevel=2"], capture_output=True, text=True, timeout=300)
    if cp.returncode != 0:
        raise SystemExit("spm_train failed: " + cp.stderr[-2000:])
    corpus.unlink()
    (out_dir / "tokenizer.vocab").unlink(missing_ok=True)
    return prefix.with_suffix(".model")


def llm_metadata_bytes():
    m = llm_metadata_pb2.LlmMetadata()
    m.start_token.token_ids.ids.append(2)
    m.stop_tokens.add().token_ids.ids.append(1)
    m.max_num_tokens = 512
    m.llm_model_type.gemma4.SetInParent()
    return m.SerializeToString()


def in_package_order(constants):
    """The constants in the order the package holds them: section by section (SECTIONS order)."""
    return [c for sec, _ in SECTIONS for c in constants if c.section == sec]


def write_package(path: Path, constants, sp_model: Path, work: Path):
    meta = work / "llm_metadata.pb"
    meta.write_bytes(llm_metadata_bytes())
    b = lb.LitertLmFileBuilder()
    b.add_system_metadata(lb.Metadata(key="Authors", value="Lumen tests", dtype=lb.DType.STRING))
    b.add_llm_metadata(str(meta))
    files = []
    for sec, model_type in SECTIONS:
        part = [c for c in constants if c.section == sec]
        if not part:
            continue
        tfl = work / f"{path.stem}.{sec}.tflite"
        tfl.write_bytes(tflite_bytes(part))
        b.add_tflite_model(str(tfl), getattr(lb.TfLiteModelType, model_type))
        files.append(tfl)
    b.add_sentencepiece_tokenizer(str(sp_model))
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        b.build(f)
    os.replace(tmp, path)
    for tfl in files:
        tfl.unlink()


def constant_table_sha256(constants):
    """What Lumen hashes (spec/litert_map.h): one line per constant, in table order."""
    type_names = {tflite.TensorType.INT4: "INT4", tflite.TensorType.INT8: "INT8", tflite.TensorType.FLOAT32: "FLOAT32"}
    h = hashlib.sha256()
    for i, c in enumerate(constants):
        h.update(f"{i}\t{c.name}\t{type_names[c.ttype]}\t{','.join(map(str, c.shape))}\n".encode())
    return h.hexdigest()


# ---------------------------------------------------------------------------- manifest


def tiny_manifest(config: dict, seed_manifest: dict, package_name: str) -> dict:
    """The seed manifest's structure with this model's shapes; package.litertlm.unsupported set."""
    m = copy.deepcopy(seed_manifest)
    c = config.get("text_config", config)
    n = c["num_hidden_layers"]
    layer_types = c["layer_types"]
    m["id"] = "lumen/tiny-gemma4-litert"
    rt = m["runtime"]
    arch = rt["architecture"]
    arch.update(vocabSize=c["vocab_size"], hiddenSize=c["hidden_size"], intermediateSize=c["intermediate_size"],
                numLayers=n, numAttentionHeads=c["num_attention_heads"], numKeyValueHeads=c["num_key_value_heads"],
                numGlobalKeyValueHeads=c.get("num_global_key_value_heads") or c["num_key_value_heads"],
                headDim=c["head_dim"], globalHeadDim=c.get("global_head_dim") or c["head_dim"],
                attentionKeyEqualsValue=bool(c.get("attention_k_eq_v")), maxSeqLen=c["max_position_embeddings"],
                hiddenSizePerLayerInput=c.get("hidden_size_per_layer_input") or 0,
                vocabSizePerLayerInput=c.get("vocab_size_per_layer_input", c["vocab_size"])
                if c.get("hidden_size_per_layer_input") else 0,
                numKvSharedLayers=c.get("num_kv_shared_layers") or 0)
    raw = rt["rawConfig"]["text_config"]
    raw.update(vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
               num_hidden_layers=n, num_attention_heads=c["num_attention_heads"],
               num_key_value_heads=c["num_key_value_heads"],
               num_global_key_value_heads=c.get("num_global_key_value_heads"), head_dim=c["head_dim"],
               global_head_dim=c.get("global_head_dim"), max_position_embeddings=c["max_position_embeddings"],
               sliding_window=c["sliding_window"], layer_types=layer_types,
               attention_k_eq_v=bool(c.get("attention_k_eq_v")),
               hidden_size_per_layer_input=c.get("hidden_size_per_layer_input") or 0,
               num_kv_shared_layers=c.get("num_kv_shared_layers") or 0,
               use_double_wide_mlp=bool(c.get("use_double_wide_mlp")))
    if c.get("hidden_size_per_layer_input"):
        raw["vocab_size_per_layer_input"] = c.get("vocab_size_per_layer_input", c["vocab_size"])
    raw.pop("rope_scaling", None)
    mi = rt["manifestInference"]
    mi.pop("unsupported", None)
    mi["attention"].update(slidingWindow=c["sliding_window"], queryKeyNormWeightLayers=list(range(n)))
    mi["layerPattern"]["layerTypes"] = layer_types
    mi["ffn"]["useDoubleWideMlp"] = bool(c.get("use_double_wide_mlp"))
    full = c["rope_parameters"]["full_attention"]
    mi["rope"].update(partialRotaryFactor=full.get("partial_rotary_factor", 1.0),
                      ropeFrequencyBaseDim=c.get("global_head_dim") or c["head_dim"],
                      ropeTheta=full["rope_theta"], ropeLocalTheta=c["rope_parameters"]["sliding_attention"]["rope_theta"])
    mi["output"].update(embeddingVocabSize=c["vocab_size"], finalLogitSoftcapping=c.get("final_logit_softcapping"))
    tok = rt["tokenizer"]["litertlm"]
    tok.update(vocabSize=c["vocab_size"], eosTokens=[1])
    lit = m["package"]["litertlm"]
    lit["layerScalarLayers"] = list(range(n))
    lit["unsupported"] = {
        "code": "tiny-litert-unverified",
        "message": f"{package_name} has not been checked against its source checkpoint.",
        "recommendation": "Run `lumen verify` against the source and pass its receipt.",
    }
    return m


# ---------------------------------------------------------------------------- main


def build(checkpoint: Path, out: Path, seed_manifest: Path | None = None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((checkpoint / "config.json").read_text())
    tc = config.get("text_config", config)
    tensors = {}
    for f in sorted(checkpoint.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    names = sorted(tensors)
    quantized = {n: quantize(n, tensors[n]) for n in names}
    split = any(n.endswith("embed_tokens_per_layer.weight") for n in names)
    sec = {n: section_of(n, split) for n in names}

    # The source after the same quantization.
    src = out / "source-q"
    src.mkdir(exist_ok=True)
    cfg = copy.deepcopy(config)
    cfg["dtype"] = "float32"
    if "torch_dtype" in cfg:
        cfg["torch_dtype"] = "float32"
    (src / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    save_file({n: np.ascontiguousarray(quantized[n]["deq"]) for n in names}, str(src / "model.safetensors"))
    for extra in ("model.safetensors.index.json",):
        (src / extra).unlink(missing_ok=True)

    work = Path(tempfile.mkdtemp(prefix="tiny-litertlm-", dir=out))
    try:
        sp = sentencepiece_model(work, tc["vocab_size"])
        shutil.copy(sp, out / "tokenizer.model")
        summary = {}

        named = [constant_from(n, quantized[n], section=sec[n]) for n in names]
        write_package(out / "tiny.litertlm", named, sp, work)

        # Unnamed: shuffled order, arith.constantN names (numbered as the package holds them),
        # INT4 fixed-scale without parameters.
        order = np.random.default_rng(7).permutation(len(names))
        shuffled = [(names[j], constant_from("", quantized[names[j]], fixed_params=False, section=sec[names[j]]))
                    for j in order]
        shuffled = [p for s_name, _ in SECTIONS for p in shuffled if p[1].section == s_name]
        unnamed, entries = [], []
        for idx, (n, c) in enumerate(shuffled):
            c.name = f"arith.constant{idx}"
            unnamed.append(c)
            layer = layer_of(n)
            short = n.split("layers.")[1].split(".", 1)[1] if layer is not None else n.split("model.", 1)[1]
            role = short[:-len(".weight")] if short.endswith(".weight") else short
            entries.append({"constant": idx, "layer": layer if layer is not None else -1, "role": role})
        write_package(out / "tiny-unnamed.litertlm", unnamed, sp, work)
        (out / "tiny-unnamed.map.json").write_text(json.dumps({
            "schema": "lumen.litert-map/v1",
            "package_tensor_table_sha256": constant_table_sha256(in_package_order(unnamed)),
            "fixed_int4": {"scale": FIXED_SCALE, "storage": "offset_binary"},
            "entries": sorted(entries, key=lambda e: e["constant"]),
        }, indent=1) + "\n")

        # Fused q/k/v on layers that have a v_proj.
        fused = []
        for n in names:
            if n.endswith("self_attn.q_proj.weight"):
                base = n[:-len("q_proj.weight")]
                if base + "v_proj.weight" in tensors:
                    ks = [quantized[base + r + "_proj.weight"] for r in "qkv"]
                    k = np.concatenate([q["k"] for q in ks])
                    fused.append(constant_from(base + "qkv_proj.weight",
                                               dict(kind="fixed", k=k, nibbles=(k + 8).astype(np.uint8))))
                    continue
            if (n.endswith("self_attn.k_proj.weight") or n.endswith("self_attn.v_proj.weight")) and \
                    n.rsplit(".", 2)[0] + ".v_proj.weight" in tensors:
                continue
            fused.append(constant_from(n, quantized[n], section=sec[n]))
        write_package(out / "tiny-fused.litertlm", fused, sp, work)

        # Layer SWAP_LAYER's gate_proj and up_proj exchanged (names stay where they were).
        swapped = [constant_from(n, quantized[n], section=sec[n]) for n in names]
        gi = names.index(f"model.layers.{SWAP_LAYER}.mlp.gate_proj.weight")
        ui = names.index(f"model.layers.{SWAP_LAYER}.mlp.up_proj.weight")
        swapped[gi].data, swapped[ui].data = swapped[ui].data, swapped[gi].data
        swapped[gi].quant, swapped[ui].quant = swapped[ui].quant, swapped[gi].quant
        write_package(out / "tiny-swapped.litertlm", swapped, sp, work)

        # Layer MISSING_LAYER dropped; later groups take its number and the ones after.
        missing = []
        for n in names:
            layer = layer_of(n)
            if layer == MISSING_LAYER:
                continue
            name = with_layer(n, layer - 1) if layer is not None and layer > MISSING_LAYER else n
            missing.append(constant_from(name, quantized[n], section=sec[n]))
        write_package(out / "tiny-missing-layer.litertlm", missing, sp, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    if seed_manifest and seed_manifest.exists():
        m = tiny_manifest(config, json.loads(seed_manifest.read_text()), "tiny.litertlm")
        (out / "tiny-manifest.json").write_text(json.dumps(m, indent=1) + "\n")
    summary = dict(layers=tc["num_hidden_layers"], constants=len(names),
                   packages=sorted(p.name for p in out.glob("*.litertlm")))
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkpoint", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seed-manifest", type=Path,
                    default=Path(__file__).resolve().parents[2] / "shared" / "manifests" / "litert-gemma-4-12b-it.json")
    a = ap.parse_args(argv)
    print(json.dumps(build(a.checkpoint, a.out, a.seed_manifest), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
