#!/usr/bin/env python3
"""A Gemma 3 `.litertlm` package's weights -> an f32 GGUF that Lumen's GGUF path runs.

    litert_package_to_gguf.py PKG --checkpoint HF_DIR --like MODEL.gguf OUT.gguf [--map-out MAP.json]

An independent check of the parity harness: the package's own constants, dequantized here
(int8 per-channel, int4 blockwise or per-channel, f16, f32), written as f32 tensors of a GGUF
whose metadata (architecture, hyperparameters, tokenizer) is copied from --like. Lumen then runs
the package's weights through the code it already trusts, so its logits can be set against the
TFLite interpreter's on the same package before Lumen reads packages itself.

Which constant is which weight: litert-torch names its constants after the ops that made them
(not after layers), so the map is found by content: every constant is compared with every
same-shaped tensor of the checkpoint the package was converted from (--checkpoint, what
tools/gguf_to_hf_checkpoint.py wrote), including each layer's fused [q; k; v] projection and the
norm gains as stored (w) and as applied (1 + w). A constant maps to the tensor with the smallest
relative error (max|Δ|/max|w|); the map is refused unless that error is under --bound and at
most AMBIGUITY (0.2) times the runner-up's, and unless every checkpoint tensor is covered
(measured: int8 0.0039 vs runner-up >= 0.67; int4 blocks of 32: 0.071 vs >= 0.74).
The weights written are the package's, never the checkpoint's. --map-out writes the map found
(constant index and name -> tensor, relative errors) as JSON.

Dequantization (TFLite schema semantics): real = scale * (q - zero_point), per channel along
`quantized_dimension`; INT4 holds two values a byte, low nibble first, signed; blockwise
quantization (QuantizationDetails.BlockwiseQuantization) takes scales and zero points from the
tensors it names, one per block of `block_size` along the last axis.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

AMBIGUITY = 0.2
NP_TYPES = {"FLOAT32": np.float32, "FLOAT16": np.float16, "INT8": np.int8, "UINT8": np.uint8,
            "INT32": np.int32, "INT64": np.int64, "INT16": np.int16}


def fail(msg: str) -> None:
    print(f"litert_package_to_gguf: error: {msg}", file=sys.stderr)
    sys.exit(1)


class TfliteConstants:
    """The constant tensors of a TFLite model, dequantized on request."""

    def __init__(self, model_bytes: bytes):
        from ai_edge_litert import schema_py_generated as schema

        self.schema = schema
        self.buf = model_bytes
        self.model = schema.Model.GetRootAs(model_bytes, 0)
        self.type_names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
        self.sg = self.model.Subgraphs(self._decode_subgraph())

    def _decode_subgraph(self) -> int:
        # Prefill signatures that output no logits lose the last layer's MLP and the final norm
        # to dead-code elimination; the decode signature's subgraph holds every weight.
        for i in range(self.model.SignatureDefsLength()):
            sd = self.model.SignatureDefs(i)
            if sd.SignatureKey() == b"decode":
                return sd.SubgraphIndex()
        return 0

    def _raw(self, t) -> bytes:
        b = self.model.Buffers(t.Buffer())
        if b.DataLength():
            return b.DataAsNumpy().tobytes()
        if b.Offset() > 1:
            return self.buf[b.Offset():b.Offset() + b.Size()]
        return b""

    def constants(self):
        """(index, name, type name, shape) of every tensor with data in the decode subgraph."""
        out = []
        for i in range(self.sg.TensorsLength()):
            t = self.sg.Tensors(i)
            b = self.model.Buffers(t.Buffer())
            if not (b.DataLength() or (b.Offset() > 1 and b.Size())):
                continue
            out.append((i, (t.Name() or b"").decode(), self.type_names.get(t.Type(), str(t.Type())),
                        tuple(int(t.Shape(k)) for k in range(t.ShapeLength()))))
        return out

    def raw_values(self, index: int) -> np.ndarray:
        t = self.sg.Tensors(index)
        tname = self.type_names.get(t.Type())
        shape = tuple(int(t.Shape(k)) for k in range(t.ShapeLength()))
        raw = self._raw(t)
        n = int(np.prod(shape)) if shape else 1
        if tname == "INT4":
            packed = np.frombuffer(raw, dtype=np.uint8)
            nib = np.empty(packed.size * 2, dtype=np.int8)
            nib[0::2] = (packed & 0x0F).astype(np.int8)
            nib[1::2] = (packed >> 4).astype(np.int8)
            nib = np.where(nib >= 8, nib - 16, nib).astype(np.int8)
            return nib[:n].reshape(shape)
        if tname not in NP_TYPES:
            fail(f"tensor {index}: type {tname} is not handled")
        return np.frombuffer(raw, dtype=NP_TYPES[tname])[:n].reshape(shape)

    def dequantized(self, index: int) -> np.ndarray:
        schema = self.schema
        t = self.sg.Tensors(index)
        q = self.raw_values(index)
        quant = t.Quantization()
        if quant is None or not (quant.ScaleLength() or quant.DetailsType()):
            return q.astype(np.float32)
        if quant.DetailsType() == schema.QuantizationDetails.BlockwiseQuantization:
            bq = schema.BlockwiseQuantization()
            bq.Init(quant.Details().Bytes, quant.Details().Pos)
            block = int(bq.BlockSize())
            scales = self.raw_values(bq.Scales()).astype(np.float32)
            zps = self.raw_values(bq.ZeroPoints()).astype(np.float32) if bq.ZeroPoints() >= 0 else 0.0
            rows, cols = q.shape
            qb = q.astype(np.float32).reshape(rows, cols // block, block)
            sb = scales.reshape(rows, cols // block, 1)
            zb = np.asarray(zps, dtype=np.float32).reshape(rows, cols // block, 1) if np.ndim(zps) else 0.0
            return ((qb - zb) * sb).reshape(rows, cols)
        scale = quant.ScaleAsNumpy().astype(np.float32)
        zp = quant.ZeroPointAsNumpy().astype(np.float32) if quant.ZeroPointLength() else np.zeros_like(scale)
        if scale.size == 1:
            return (q.astype(np.float32) - zp[0]) * scale[0]
        axis = quant.QuantizedDimension()
        bshape = [1] * q.ndim
        bshape[axis] = scale.size
        return (q.astype(np.float32) - zp.reshape(bshape)) * scale.reshape(bshape)


def _source_candidates(ckpt: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    src = load_file(str(ckpt / "model.safetensors"))
    cands = dict(src)
    n_layers = json.loads((ckpt / "config.json").read_text())["num_hidden_layers"]
    for i in range(n_layers):
        p = f"model.layers.{i}.self_attn."
        cands[p + "qkv_proj.weight"] = np.concatenate(
            [src[p + "q_proj.weight"], src[p + "k_proj.weight"], src[p + "v_proj.weight"]], axis=0)
    for k in list(src):
        if k.endswith("norm.weight"):
            cands[k + "+1"] = src[k] + np.float32(1.0)
    return cands


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(float(np.abs(b).max()), 1e-30))


def find_map(consts: TfliteConstants, cands: dict[str, np.ndarray], bound: float) -> list[dict]:
    """Each constant that matches a checkpoint tensor (by shape, as is or transposed) -> that tensor."""
    by_shape: dict[tuple, list[str]] = {}
    for k, v in cands.items():
        by_shape.setdefault(tuple(v.shape), []).append(k)
    found = []
    for index, name, tname, shape in consts.constants():
        if tname not in ("FLOAT32", "FLOAT16", "INT8", "INT4") or len(shape) == 0 or int(np.prod(shape)) < 64:
            continue
        options = [(k, False) for k in by_shape.get(shape, [])]
        if len(shape) == 2 and shape[0] != shape[1]:
            options += [(k, True) for k in by_shape.get(shape[::-1], [])]
        if not options:
            continue
        w = consts.dequantized(index)
        errs = sorted((_rel_err(w.T if tr else w, cands[k]), k, tr) for k, tr in options)
        best, runner = errs[0], (errs[1][0] if len(errs) > 1 else float("inf"))
        if best[0] > bound:
            continue  # not a weight of the checkpoint (scales, zero points, masks, rope tables)
        if best[0] > AMBIGUITY * runner:
            fail(f"constant {index} ({name}): ambiguous, {best[1]} at {best[0]:.3g} vs runner-up {runner:.3g}")
        found.append({"index": index, "name": name, "type": tname, "shape": list(shape), "tensor": best[1],
                      "transposed": best[2], "rel_err": best[0], "runner_up_rel_err": runner})
    return found


GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
}
LAYER_TO_GGUF = {
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight", "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf: str) -> str:
    if hf in GGUF_NAMES:
        return GGUF_NAMES[hf]
    _, _, layer, rest = hf.split(".", 3)
    return f"blk.{layer}.{LAYER_TO_GGUF[rest]}"


def gguf_tensors(consts: TfliteConstants, mapping: list[dict], cfg: dict) -> dict[str, np.ndarray]:
    """GGUF tensors (llama.cpp conventions: norm gains stored as 1 + w) from the package's values."""
    out: dict[str, np.ndarray] = {}
    sources: dict[str, str] = {}
    for m in mapping:
        w = consts.dequantized(m["index"])
        if m["transposed"]:
            w = w.T
        hf = m["tensor"]
        parts: list[tuple[str, np.ndarray]]
        if hf.endswith("qkv_proj.weight"):
            prefix = hf[: -len("qkv_proj.weight")]
            nq = cfg["num_attention_heads"] * cfg["head_dim"]
            nk = cfg["num_key_value_heads"] * cfg["head_dim"]
            parts = [(prefix + "q_proj.weight", w[:nq]), (prefix + "k_proj.weight", w[nq:nq + nk]),
                     (prefix + "v_proj.weight", w[nq + nk:])]
        elif hf.endswith("+1"):
            parts = [(hf[:-2], w)]
        elif hf.endswith("norm.weight"):
            parts = [(hf, w + np.float32(1.0))]
        else:
            parts = [(hf, w)]
        for name, value in parts:
            g = gguf_name(name)
            if g in out:
                # The tied embedding can appear twice (lookup table and output projection):
                # keep the first and say so in the map; both must be the same weight.
                sources[g] += f", also constant {m['index']}"
                continue
            out[g] = np.ascontiguousarray(value, dtype=np.float32)
            sources[g] = f"constant {m['index']} {m['name']}"
    expected = 2 + 13 * cfg["num_hidden_layers"]
    if len(out) != expected:
        have = set(out)
        want = {gguf_name(k) for k in GGUF_NAMES} | {f"blk.{i}.{v}" for i in range(cfg["num_hidden_layers"])
                                                     for v in LAYER_TO_GGUF.values()}
        fail(f"the package covers {len(out)} of {expected} weights; missing: {sorted(want - have)[:8]}")
    return out


def write_gguf(like: Path, tensors: dict[str, np.ndarray], out: Path) -> None:
    import gguf

    reader = gguf.GGUFReader(str(like))
    arch = reader.fields["general.architecture"].contents()
    tmp = out.with_name(out.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.file_type"):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, field.contents(), vtype, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, field.contents(), vtype)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    order = [t.name for t in reader.tensors]
    for name in order:
        if name not in tensors:
            fail(f"{like}: tensor {name} has no counterpart in the package")
        writer.add_tensor(name, tensors[name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)


def convert(package: Path, checkpoint: Path, like: Path, out: Path, map_out: Path | None = None,
            bound: float = 0.25) -> list[dict]:
    import reference_litert

    consts = TfliteConstants(reference_litert.tflite_bytes(package))
    cfg = json.loads((checkpoint / "config.json").read_text())
    mapping = find_map(consts, _source_candidates(checkpoint), bound)
    tensors = gguf_tensors(consts, mapping, cfg)
    if map_out is not None:
        map_out.write_text(json.dumps(mapping, indent=1) + "\n")
    write_gguf(like, tensors, out)
    return mapping


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("package", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--like", type=Path, required=True)
    p.add_argument("--map-out", type=Path)
    p.add_argument("--bound", type=float, default=0.25,
                   help="largest max|Δ|/max|w| a quantized constant may have against its source tensor")
    args = p.parse_args(argv)
    for f in (args.package, args.checkpoint / "model.safetensors", args.like):
        if not f.is_file():
            fail(f"{f}: no such file")
    mapping = convert(args.package, args.checkpoint, args.like, args.out, args.map_out, args.bound)
    worst = max(m["rel_err"] for m in mapping)
    print(json.dumps({"out": str(args.out), "constants_mapped": len(mapping), "worst_rel_err": worst}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
