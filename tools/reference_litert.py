#!/usr/bin/env python3
"""Google's own runtimes on a `.litertlm` package: the references of tests/parity/test_litert_google.py.

Runs in the `.venv-litert` venv (tools/requirements-litert.txt).

    reference_litert.py logits PKG --tokens 2,818,5279 --out F.npy
        The TFLite interpreter of ai-edge-litert on the package's prefill/decode model: the
        `decode` signature fed one token at a time (tokens, input_pos, the causal mask when the
        model takes one, and the KV caches it returned last step), float32 logits [T, V] of every
        position. Inputs that are neither (LoRA weights of test_lm_lora.litertlm) are fed zeros.
    reference_litert.py generate PKG -p TEXT -n N [--template]
        litert-lm (the LiteRT-LM runtime) on the CPU: greedy generation (top_k 1) of at most N
        tokens after TEXT, as JSON {"text", "ids"} (ids: the text re-tokenized by the package's
        own tokenizer, which litert-lm exposes). Without --template the text is prefilled as is
        (litert-lm still puts the start token first).
    reference_litert.py tokenize PKG TEXT   (litert-lm's tokenizer, JSON ids)
    reference_litert.py signatures PKG      (the TFLite signatures, their inputs and outputs, JSON)
    reference_litert.py golden PKG --prompts P.json -n N --out DIR
        Everything the parity test needs, in one process: for each prompt text, its ids (the
        start token, then litert-lm's tokenization), the interpreter's logits of those ids and
        litert-lm's greedy text of N tokens; DIR/golden.json + DIR/logits_K.npy.

Importable: tflite_bytes(pkg), DecodeRunner(pkg).logits(ids), generate(pkg, text, n), tokenize(pkg, text).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

TFLITE_MODEL = 3  # LiteRT-LM section data type of a TFLite model


def tflite_bytes(package: Path, model_type: str = "tf_lite_prefill_decode") -> bytes:
    """The TFLite section of the package whose `model_type` item is model_type (or the only one)."""
    from litert_lm_builder import litertlm_header_schema_py_generated as hdr

    data = Path(package).read_bytes()
    if data[:8] != b"LITERTLM":
        raise SystemExit(f"reference_litert: error: {package}: not a .litertlm package (bad magic)")
    meta = hdr.LiteRTLMMetaData.GetRootAs(data, 32)
    sections = meta.SectionMetadata()
    found = []
    for s in range(sections.ObjectsLength()):
        obj = sections.Objects(s)
        if obj.DataType() != TFLITE_MODEL:
            continue
        kind = None
        for i in range(obj.ItemsLength()):
            kv = obj.Items(i)
            if kv.Key() == b"model_type" and kv.ValueType() == hdr.VData.StringValue:
                sv = hdr.StringValue()
                sv.Init(kv.Value().Bytes, kv.Value().Pos)
                kind = sv.Value().decode()
        found.append((kind, data[obj.BeginOffset():obj.EndOffset()]))
    for kind, b in found:
        if kind == model_type:
            return b
    if len(found) == 1:
        return found[0][1]
    raise SystemExit(f"reference_litert: error: {package}: no TFLite section of model_type {model_type}")


class DecodeRunner:
    """The `decode` signature run token by token with its own KV caches carried between steps."""

    def __init__(self, package: Path, threads: int = 1):
        from ai_edge_litert.interpreter import Interpreter

        self.interp = Interpreter(model_content=tflite_bytes(package), num_threads=threads)
        self.runner = self.interp.get_signature_runner("decode")
        self.inputs = self.runner.get_input_details()
        self.outputs = self.runner.get_output_details()
        self.cache_names = [n for n in self.inputs if n in self.outputs]
        if "logits" not in self.outputs:
            raise SystemExit("reference_litert: error: the decode signature has no `logits` output")

    def _zeros(self, name):
        d = self.inputs[name]
        return np.zeros(d["shape"], dtype=d["dtype"])

    def _mask(self, pos: int):
        d = self.inputs["mask"]
        shape = d["shape"]
        m = np.full(shape, np.finfo(np.float32).min if d["dtype"] == np.float32 else 0, dtype=d["dtype"])
        if d["dtype"] == np.bool_:
            m[..., :pos + 1] = True
        else:
            m[..., :pos + 1] = 0
        return m

    def logits(self, ids) -> np.ndarray:
        state = {n: self._zeros(n) for n in self.cache_names}
        rows = []
        for pos, tok in enumerate(ids):
            feed = dict(state)
            for name, d in self.inputs.items():
                if name in feed:
                    continue
                if name == "tokens":
                    feed[name] = np.array([[tok]], dtype=d["dtype"]).reshape(d["shape"])
                elif name == "input_pos":
                    feed[name] = np.array([pos], dtype=d["dtype"]).reshape(d["shape"])
                elif name == "mask":
                    feed[name] = self._mask(pos)
                else:
                    feed[name] = self._zeros(name)
            out = self.runner(**feed)
            rows.append(np.asarray(out["logits"], dtype=np.float32).reshape(-1))
            state = {n: out[n] for n in self.cache_names}
        return np.stack(rows)

    def signatures(self) -> dict:
        res = {}
        for name in self.interp.get_signature_list():
            r = self.interp.get_signature_runner(name)
            res[name] = {
                "inputs": {k: [list(map(int, v["shape"])), np.dtype(v["dtype"]).name] for k, v in r.get_input_details().items()},
                "outputs": {k: [list(map(int, v["shape"])), np.dtype(v["dtype"]).name] for k, v in r.get_output_details().items()},
            }
        return res


_ENGINE_CACHE = None


def _engine(package: Path):
    """litert-lm's engine on the CPU, one thread. Its XNNPACK weight cache (as large as the
    unpacked weights: 1 GB for an int8 weight-only 270M) goes to a temporary folder, not beside
    the package."""
    global _ENGINE_CACHE
    import atexit
    import shutil
    import tempfile

    import litert_lm

    if _ENGINE_CACHE is None:
        _ENGINE_CACHE = tempfile.mkdtemp(prefix="litert-lm-cache-")
        atexit.register(shutil.rmtree, _ENGINE_CACHE, True)
    return litert_lm.Engine(str(package), backend=litert_lm.Backend.CPU(thread_count=1), cache_dir=_ENGINE_CACHE)


def tokenize(package: Path, text: str) -> list[int]:
    engine = _engine(package)
    try:
        return list(engine.tokenize(text))
    finally:
        engine.close()


def generate(package: Path, text: str, n: int, template: bool = False) -> dict:
    import litert_lm

    engine = _engine(package)
    try:
        session = engine.create_session(apply_prompt_template=template,
                                        sampler_config=litert_lm.SamplerConfig(top_k=1, temperature=0.0),
                                        max_output_tokens=n)
        try:
            session.run_prefill([text])
            res = session.run_decode()
            out = res.texts[0] if res.texts else ""
        finally:
            session.close()
        ids = list(engine.tokenize(out)) if out else []
        return {"text": out, "ids": ids, "bos": engine.bos_token_id, "eos": engine.eos_token_ids}
    finally:
        engine.close()


def golden(package: Path, prompts: list[str], n: int, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    runner = DecodeRunner(package)
    res = {"package": str(package), "n": n, "cases": []}
    for k, text in enumerate(prompts):
        gen = generate(package, text, n)
        ids = [int(gen["bos"])] + tokenize(package, text)
        np.save(out / f"logits_{k}.npy", runner.logits(ids))
        res["cases"].append({"prompt": text, "ids": ids, "litert_lm_text": gen["text"],
                             "litert_lm_text_ids": gen["ids"], "eos": gen["eos"]})
    (out / "golden.json").write_text(json.dumps(res, indent=1) + "\n")
    return res


def _ids(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    lg = sub.add_parser("logits")
    lg.add_argument("package", type=Path)
    lg.add_argument("--tokens", required=True)
    lg.add_argument("--out", required=True)
    gen = sub.add_parser("generate")
    gen.add_argument("package", type=Path)
    gen.add_argument("-p", "--prompt", required=True)
    gen.add_argument("-n", type=int, default=32)
    gen.add_argument("--template", action="store_true")
    tk = sub.add_parser("tokenize")
    tk.add_argument("package", type=Path)
    tk.add_argument("text")
    gd = sub.add_parser("golden")
    gd.add_argument("package", type=Path)
    gd.add_argument("--prompts", type=Path, required=True)
    gd.add_argument("-n", type=int, default=24)
    gd.add_argument("--out", type=Path, required=True)
    sg = sub.add_parser("signatures")
    sg.add_argument("package", type=Path)
    args = p.parse_args(argv)
    if not args.package.is_file():
        print(f"reference_litert: error: {args.package}: no such file", file=sys.stderr)
        return 1
    if args.command == "logits":
        np.save(args.out, DecodeRunner(args.package).logits(_ids(args.tokens)))
    elif args.command == "generate":
        print(json.dumps(generate(args.package, args.prompt, args.n, args.template)))
    elif args.command == "golden":
        golden(args.package, json.loads(args.prompts.read_text()), args.n, args.out)
    elif args.command == "tokenize":
        print(json.dumps(tokenize(args.package, args.text)))
    else:
        print(json.dumps(DecodeRunner(args.package).signatures(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
