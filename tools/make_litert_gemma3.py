#!/usr/bin/env python3
"""Real `.litertlm` packages of the default model, made by Google's converter (litert-torch).

    make_litert_gemma3.py [--recipe int8|int4|f32 ...] [--gguf models/gemma-3-270m-q4_k_m.gguf]
                          [--cache .cache/litert] [--publish /work/cache/litert]

Runs in the `.venv-litert` venv (scripts/setup --test makes it from tools/requirements-litert.txt).
Steps, each cached under --cache keyed by its inputs:
  1. tools/gguf_to_hf_checkpoint.py: the GGUF -> an f32 HF checkpoint + config.json + a
     SentencePiece tokenizer.model (hf-<gguf hash>/).
  2. litert-torch's Gemma 3 270M builder (`gemma3.build_model_270m`, the converter's own example
     model) loads that checkpoint; `converter.convert_to_litert(..., output_format='litertlm')`
     converts it with the recipe's quantization and packs it with the tokenizer and LLM metadata
     (LiteRT-LM's own builder) into gemma3-270m-<recipe>-<key>.litertlm.
  3. Beside it: NAME.tensors.txt (every TFLite tensor that has data: index, name, type, shape,
     quantization) and NAME.config.json (the HF config the weights came from).
Recipes (litert-torch's names): int8 = dynamic_int8 (per-channel int8 weights), int4 =
dynamic_int4_block32 (int4 weights, blockwise 32), int8wo = weight_only_int8 (int8 weights
dequantized in the graph, activations stay float: the recipe Lumen's f32 path can match tightly),
f32 = none. The "dynamic" recipes make the runtime quantize activations to int8 on the fly.
Prints one JSON line per recipe: {"recipe", "package", "seconds", "cached"}.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / "tools"
sys.path.insert(0, str(TOOLS))

RECIPES = {"int8": "dynamic_int8", "int4": "dynamic_int4_block32", "int8wo": "weight_only_int8", "f32": "none"}
# Small, fixed conversion shape: one prefill signature of 32 tokens and a 256-token KV cache are
# enough for the parity prompts, and each extra prefill length costs another graph export.
PREFILL_LENS = [32]
KV_CACHE_MAX_LEN = 256
PACKAGE_SETTINGS = {
    "llm_model_type": "gemma3",
    "start_token_id": 2,
    "stop_token_ids": [1, 106],
    "user_prompt_prefix": "<start_of_turn>user\n",
    "user_prompt_suffix": "<end_of_turn>\n",
    "model_prompt_prefix": "<start_of_turn>model\n",
    "model_prompt_suffix": "<end_of_turn>\n",
}
# Bump when convert() changes what it asks the converter for (the cache key includes it, not
# this file's text, so edits elsewhere here do not force a re-conversion).
CONVERSION_VERSION = 1
DEFAULT_GGUF = REPO / "models" / "gemma-3-270m-q4_k_m.gguf"


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _versions() -> str:
    from importlib.metadata import version

    return " ".join(f"{p}={version(p)}" for p in ("litert-torch", "ai-edge-litert", "litert-lm-builder", "torch"))


def checkpoint(gguf: Path, cache: Path, gguf_sha: str) -> Path:
    import gguf_to_hf_checkpoint as g2h

    key = hashlib.sha256((gguf_sha + (TOOLS / "gguf_to_hf_checkpoint.py").read_text()).encode()).hexdigest()[:16]
    out = cache / f"hf-{key}"
    if not (out / "model.safetensors").is_file():
        g2h.convert(gguf, out, "f32")
    return out


def recipe_key(recipe: str, gguf_sha: str) -> str:
    h = hashlib.sha256()
    for part in (recipe, gguf_sha, _versions(), json.dumps([PREFILL_LENS, KV_CACHE_MAX_LEN, PACKAGE_SETTINGS]),
                 (TOOLS / "gguf_to_hf_checkpoint.py").read_text(), str(CONVERSION_VERSION)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:12]


def tensor_dump(package: Path) -> str:
    """Every constant tensor of every TFLite section: index, name, type, shape, quantization."""
    from ai_edge_litert import schema_py_generated as schema
    from litert_lm_builder import litertlm_core  # noqa: F401  (same package family as the writer)

    import struct

    data = package.read_bytes()
    from litert_lm_builder import litertlm_header_schema_py_generated as hdr

    meta = hdr.LiteRTLMMetaData.GetRootAs(data, 32)
    types = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    lines = [f"# {package.name}: TFLite constants (tensors with buffer data)",
             "# index\tname\ttype\tshape\tquantization"]
    sections = meta.SectionMetadata()
    for s in range(sections.ObjectsLength()):
        obj = sections.Objects(s)
        if obj.DataType() != 3:  # TFLiteModel
            continue
        begin, end = obj.BeginOffset(), obj.EndOffset()
        buf = data[begin:end]
        model = schema.Model.GetRootAs(buf, 0)
        lines.append(f"# section {s}: TFLiteModel bytes [{begin}, {end})")
        for sg_i in range(model.SubgraphsLength()):
            sg = model.Subgraphs(sg_i)
            for t_i in range(sg.TensorsLength()):
                t = sg.Tensors(t_i)
                b = model.Buffers(t.Buffer())
                size = b.DataLength() if b.DataLength() else (b.Size() if b.Offset() > 1 else 0)
                if size == 0:
                    continue
                q = t.Quantization()
                qtext = "none"
                if q is not None and (q.ScaleLength() or q.ZeroPointLength() or q.DetailsType()):
                    parts = [f"scale_shape=[{q.ScaleLength()}]", f"zero_point_shape=[{q.ZeroPointLength()}]",
                             f"quantized_dimension={q.QuantizedDimension()}"]
                    if q.ScaleLength():
                        parts.append(f"scale[0]={q.Scale(0):.8g}")
                    if q.ZeroPointLength():
                        zps = {q.ZeroPoint(i) for i in range(min(q.ZeroPointLength(), 4096))}
                        parts.append(f"zero_points={sorted(zps)[:4]}")
                    if q.DetailsType() == schema.QuantizationDetails.BlockwiseQuantization:
                        bq = schema.BlockwiseQuantization()
                        bq.Init(q.Details().Bytes, q.Details().Pos)
                        parts.append(f"blockwise block_size={bq.BlockSize()} scales_tensor={bq.Scales()} "
                                     f"zero_points_tensor={bq.ZeroPoints()}")
                    elif q.DetailsType():
                        parts.append(f"details_type={q.DetailsType()}")
                    qtext = " ".join(parts)
                shape = [t.Shape(i) for i in range(t.ShapeLength())]
                name = (t.Name() or b"").decode()
                lines.append(f"{t_i}\t{name}\t{types.get(t.Type(), t.Type())}\t{shape}\t{qtext}\t"
                             f"subgraph={sg_i} buffer={t.Buffer()} bytes={size}")
    del struct
    return "\n".join(lines) + "\n"


def _tensorflow_schema_shim() -> None:
    """litert-torch 0.10.0's generative layers (layers/lora.py) import TensorFlow's TFLite
    FlatBuffer schema module at import time, though the package does not depend on TensorFlow
    and its default converter does not use it. The same generated schema ships in ai-edge-litert;
    it is registered under TensorFlow's module name (only that module: `import tensorflow`
    elsewhere still fails, so litert-torch's TensorFlow checks still see no TensorFlow)."""
    import importlib.util
    import types

    if importlib.util.find_spec("tensorflow") is not None:
        return
    import torch._dynamo  # noqa: F401  (its import-time scan of installed modules must not see the shim)
    from ai_edge_litert import schema_py_generated

    for name in ("tensorflow", "tensorflow.lite", "tensorflow.lite.python"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["tensorflow.lite.python.schema_py_generated"] = schema_py_generated
    sys.modules["tensorflow.lite.python"].schema_py_generated = schema_py_generated


def convert(recipe: str, ckpt: Path, out: Path) -> None:
    _tensorflow_schema_shim()
    import torch
    from litert_torch.generative.examples.gemma3 import gemma3
    from litert_torch.generative.layers import kv_cache as kv_utils
    from litert_torch.generative.utilities import converter, export_config

    torch.set_num_threads(1)
    model = gemma3.build_model_270m(str(ckpt), None, 0)
    # The converter example's defaults for Gemma 3: mask as an input, transposed KV cache.
    cfg = export_config.ExportConfig(mask_as_input=True, kvcache_layout=kv_utils.KV_LAYOUT_TRANSPOSED)
    tmp = out.parent / f".{out.name}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        converter.convert_to_litert(
            model, output_path=str(tmp), output_name_prefix="gemma3-270m",
            prefill_seq_len=PREFILL_LENS, kv_cache_max_len=KV_CACHE_MAX_LEN,
            quantize=RECIPES[recipe], export_config=cfg, output_format="litertlm",
            tokenizer_model_path=str(ckpt / "tokenizer.model"), **PACKAGE_SETTINGS)
        made = list(tmp.glob("*.litertlm"))
        if len(made) != 1:
            raise RuntimeError(f"the converter wrote {made}, expected one .litertlm")
        os.replace(made[0], out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build(recipe: str, gguf: Path = DEFAULT_GGUF, cache: Path = REPO / ".cache" / "litert",
          publish: Path | None = None) -> dict:
    cache.mkdir(parents=True, exist_ok=True)
    gguf_sha = file_hash(gguf)
    key = recipe_key(recipe, gguf_sha)
    name = f"gemma3-270m-{recipe}-{key}"
    package = cache / f"{name}.litertlm"
    t0 = time.time()
    cached = package.is_file()
    ckpt = checkpoint(gguf, cache, gguf_sha)
    if not cached:
        convert(recipe, ckpt, package)
    tensors = cache / f"{name}.tensors.txt"
    if not tensors.is_file():
        tensors.write_text(tensor_dump(package))
    config = cache / f"{name}.config.json"
    shutil.copyfile(ckpt / "config.json", config)
    result = {"recipe": recipe, "package": str(package), "config": str(config), "checkpoint": str(ckpt),
              "seconds": round(time.time() - t0, 1), "cached": cached}
    if publish is not None:
        publish.mkdir(parents=True, exist_ok=True)
        for src in (package, tensors, config):
            dst = publish / src.name
            if not dst.exists():
                try:
                    os.link(src, dst)
                except OSError:
                    shutil.copyfile(src, dst)
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipe", action="append", choices=sorted(RECIPES))
    p.add_argument("--gguf", type=Path, default=DEFAULT_GGUF)
    p.add_argument("--cache", type=Path, default=REPO / ".cache" / "litert")
    p.add_argument("--publish", type=Path)
    args = p.parse_args(argv)
    if not args.gguf.is_file():
        print(f"make_litert_gemma3: error: {args.gguf}: no such file (scripts/setup installs it)", file=sys.stderr)
        return 1
    for recipe in args.recipe or ["int8", "int4"]:
        print(json.dumps(build(recipe, args.gguf, args.cache, args.publish)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
