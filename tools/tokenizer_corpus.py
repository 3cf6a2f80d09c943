"""Deterministic, varied text for tokenizer parity tests and benchmarks (nothing is committed).

    python tools/tokenizer_corpus.py --seed 0 --size 1100000 --out corpus.jsonl

Writes JSON Lines, one document (a JSON string) a line. Documents mix: prose in several
languages and scripts (Latin, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Thai, CJK, kana,
Hangul), source code, emoji (with ZWJ sequences, skin tones, flags), digits and numbers, runs
of spaces/tabs/newlines, random code points from all planes (byte-fallback territory),
combining marks and zero-width characters, and the text of special and added tokens
("<start_of_turn>", "<bos>", "<unused12>", "<|turn>", "▁▁", partial ones). Some documents
are long runs (a 100 kB run of spaces, one 50 kB word) that catch quadratic tokenizers.
"""
from __future__ import annotations

import argparse
import json
import random
import sys

WORDS = """the of and to in is that for it as was with be by on not he this are or his from at which but
have an they you were her she there been one all we their has would when if so no will can more
about said what some could them into only time two may then do first any like my now over such our
man me even most made after also did many before must through back years where much your way well
down should because each just those people how too little state good very make world still own see
men work long get here between both life being under never day same another know while last might
us great old year off come since against go came right used take three tokenizer merges vocabulary
byte fallback parity Gemma model inference engine kernel matrix vector quantization cache""".split()

PHRASES = [
    "Привет, как дела? Сегодня хорошая погода, и мы идём гулять в парк.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Καλημέρα! Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "مرحبا بالعالم، هذا نص تجريبي باللغة العربية لاختبار المحلل.",
    "שלום עולם, זהו טקסט לבדיקה בעברית.",
    "नमस्ते दुनिया, यह हिंदी में एक परीक्षण वाक्य है।",
    "สวัสดีชาวโลก นี่คือประโยคทดสอบภาษาไทย",
    "你好，世界！这是一个用于测试分词器的中文句子。机器学习和自然语言处理。",
    "東京は日本の首都です。ひらがな、カタカナ、そして漢字を使います。",
    "안녕하세요 세계! 이것은 한국어 테스트 문장입니다.",
    "Größe, Übermaß und Straße: Fußgänger überqueren die Brücke.",
    "Ça va très bien, merci ! L'été dernier, nous sommes allés à la mer.",
    "¿Dónde está la biblioteca? ¡Qué día tan bonito!",
    "Việt Nam là một quốc gia ở Đông Nam Á.",
    "Türkçe karakterler: ğüşıöç ĞÜŞİÖÇ.",
    "Ελληνικά, Русский, 日本語, العربية, עברית, हिन्दी in one line.",
    "ქართული ენა, Հայերեն լեզու, ᐃᓄᒃᑎᑐᑦ, ꦗꦮ, ᠮᠣᠩᠭᠣᠯ",
]

CODE = [
    'def {f}({a}, {b}=None):\n    """Return the {a} of {b}."""\n    if {b} is None:\n        return [{a} * 2 for _ in range({n})]\n    return {{"{a}": {a}, "{b}": {b}}}\n',
    '#include <vector>\n\nint {f}(const std::vector<int>& {a}) {{\n\tint {b} = 0;\n\tfor (size_t i = 0; i < {a}.size(); ++i) {b} += {a}[i] * {n};\n\treturn {b};\n}}\n',
    'fn {f}({a}: &[u8]) -> Option<usize> {{\n    let {b} = {a}.iter().position(|&x| x == b\'\\n\')?;\n    Some({b} + {n})\n}}\n',
    'const {f} = async ({a}) => {{\n  const {b} = await fetch(`/api/${{{a}}}?limit={n}`);\n  return {b}.json();\n}};\n',
    'SELECT {a}, COUNT(*) AS {b} FROM {f} WHERE {a} > {n} GROUP BY {a} ORDER BY {b} DESC;\n',
    '<div class="{f}">\n  <span id="{a}">{n}</span>\n  <table><tr><td>{b}</td></tr></table>\n</div>\n',
    '{{"{f}": [{n}, {n}.5, -{n}e-3], "{a}": null, "{b}": true}}\n',
]

EMOJI = ["😀", "🎉", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🇫🇷", "🇯🇵", "❤️", "🏳️‍🌈", "🧑🏿‍🚀", "🤖", "✨", "🔥", "🙏🏻", "☕", "⚡"]

SPECIALS = ["<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "[multimodal]",
            "<unused0>", "<unused12>", "<unused6241>", "<|turn>", "<turn|>", "<|think|>", "<start_of_image>",
            "<image_soft_token>", "<0x0A>", "<0xFF>", "▁", "▁▁", "▁▁▁▁", "<start_of", "<<bos>>", "<bos<eos>>",
            "<table>", "</table>", "<b>", "<h1>", "\u2581hello"]

RANGES = [(0x20, 0x7e), (0xa0, 0x24f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x6ff), (0x900, 0x97f),
          (0xe00, 0xe7f), (0x1100, 0x11ff), (0x3040, 0x30ff), (0x4e00, 0x9fff), (0xac00, 0xd7a3),
          (0x1f300, 0x1faff), (0x10000, 0x1ffff), (0x20000, 0x2a6df), (0xe000, 0xf8ff), (0xf0000, 0xf00ff),
          (0x0300, 0x036f), (0x2000, 0x206f), (0xfe00, 0xfe0f), (0x1, 0x1f)]


def random_code_points(rng: random.Random, n: int) -> str:
    out = []
    for _ in range(n):
        lo, hi = rng.choice(RANGES)
        cp = rng.randint(lo, hi)
        if 0xd800 <= cp <= 0xdfff:
            cp = 0xfffd
        out.append(chr(cp))
    return "".join(out)


def whitespace_run(rng: random.Random) -> str:
    n = rng.choice([1, 2, 3, 4, 7, 8, 15, 16, 31, 32, 33, 64, 100, 300])
    return "".join(rng.choice([" ", " ", " ", "\t", "\n", "\r\n", "\u3000", "\xa0"]) for _ in range(n))


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(3, 18))]
    if rng.random() < 0.3:
        words[0] = words[0].capitalize()
    if rng.random() < 0.2:
        words.insert(rng.randint(0, len(words)), str(rng.randint(0, 10 ** rng.randint(1, 12))))
    if rng.random() < 0.1:
        words.insert(rng.randint(0, len(words)), rng.choice(words).upper())
    return " ".join(words) + rng.choice([".", "!", "?", ",", ";", ":", "...", ""])


def piece(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.30:
        return sentence(rng)
    if kind < 0.45:
        return rng.choice(PHRASES)
    if kind < 0.57:
        tmpl = rng.choice(CODE)
        ident = lambda: rng.choice(["x", "data", "buffer_size", "userId", "kMax", "_tmp", "Über", "名前"])
        return tmpl.format(f=ident() + str(rng.randint(0, 99)), a=ident(), b=ident() + "2", n=rng.randint(0, 4096))
    if kind < 0.63:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 6)))
    if kind < 0.70:
        return whitespace_run(rng)
    if kind < 0.76:
        return rng.choice(["", " ", "$", "#", "0x"]) + "".join(rng.choice("0123456789.,-+e") for _ in range(rng.randint(1, 40)))
    if kind < 0.84:
        return rng.choice(SPECIALS)
    if kind < 0.94:
        return random_code_points(rng, rng.randint(1, 40))
    return rng.choice(["\u200b", "\u200d", "\ufeff", "e\u0301", "\u0915\u094d\u0937", "a\u0308\u0323", "\u202e", "\x00", "\x7f"])


def document(rng: random.Random, target: int) -> str:
    parts = []
    size = 0
    while size < target:
        p = piece(rng)
        parts.append(p)
        parts.append(rng.choice([" ", " ", "", "\n", "\n\n", "  ", "\t"]))
        size += len(p.encode("utf-8")) + 1
    return "".join(parts)


def corpus(seed: int, size: int, long_runs: bool = True) -> list[str]:
    """Documents whose UTF-8 sizes add up to at least `size` bytes."""
    rng = random.Random(seed)
    docs = []
    total = 0
    if long_runs:
        docs += [" " * 100_000, "a" * 50_000, "\n" * 5_000 + "x", "▁" * 3_000, "<bos>" * 2_000,
                 "".join(rng.choice("ab") for _ in range(30_000)), "😀" * 5_000]
        total += sum(len(d.encode("utf-8")) for d in docs)
    while total < size:
        d = document(rng, rng.choice([20, 100, 500, 2_000, 8_000, 30_000]))
        docs.append(d)
        total += len(d.encode("utf-8"))
    return docs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", type=int, default=1_100_000, help="total UTF-8 bytes (at least)")
    ap.add_argument("--no-long-runs", action="store_true")
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    docs = corpus(args.seed, args.size, not args.no_long_runs)
    text = "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
