#!/usr/bin/env python3
"""Reference dequantization fingerprints for tests/unit/test_ggml_blocks.cpp, from gguf-py.

For every ggml block type Lumen reads, 8 blocks of pseudo-random bytes (splitmix64, the same
generator as the unit test; f16 scale fields replaced by finite normal halves) are expanded
by gguf-py's `gguf.quants.dequantize`, and the f32 results are hashed (FNV-1a 64 over their
little-endian bytes). The unit test expands the same bytes with Lumen's reference and must
get the same hash, bit for bit. Run: .venv/bin/python tools/ggml_dequant_vectors.py
"""
import numpy as np
from gguf import GGMLQuantizationType as T, GGML_QUANT_SIZES
from gguf.quants import dequantize

MASK = (1 << 64) - 1
BLOCKS = 8
# f16 fields (byte offsets in a block) that must hold a finite scale.
HALF_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_NL": [0], "IQ4_XS": [0],
}


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)


def blocks_bytes(type_id, block_bytes, fields):
    rng = SplitMix64(type_id * 1000 + 1)
    out = bytearray()
    for _ in range(BLOCKS):
        block = bytearray(rng.next() & 0xFF for _ in range(block_bytes))
        for off in fields:
            r = rng.next()
            half = (r & 0x83FF) | ((8 + (r >> 16) % 15) << 10)
            block[off:off + 2] = half.to_bytes(2, "little")
        out += block
    return bytes(out)


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def main():
    for name, fields in HALF_FIELDS.items():
        t = getattr(T, name)
        block_elems, block_bytes = GGML_QUANT_SIZES[t]
        raw = np.frombuffer(blocks_bytes(int(t), block_bytes, fields), dtype=np.uint8)
        values = dequantize(raw.reshape(1, -1), t).astype(np.float32).reshape(-1)
        assert values.size == BLOCKS * block_elems and np.isfinite(values).all()
        print(f'    {{"{name}", 0x{fnv1a64(values.tobytes()):016x}ull, {float(values[0])!r}f}},')


if __name__ == "__main__":
    main()
