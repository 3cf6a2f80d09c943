"""`lumen tokenize` with the real Gemma 3 tokenizer.json equals Hugging Face `tokenizers` on >= 1 MB of
varied text (tools/tokenizer_corpus.py, seed 0): every id, with and without special-token parsing;
`lumen detokenize` equals tokenizers' decode and gives back the text (the decoder maps "▁" to " ",
so texts holding a literal "▁" come back with a space there)."""
from __future__ import annotations

import pytest
from conftest import describe, lumen_bin, record, run_lumen, work_dir

import tokenizer_corpus
import tokenizer_refs as refs

CORPUS_BYTES = 1_100_000


@pytest.fixture(scope="module")
def setup():
    from tokenizers import Tokenizer

    path = refs.gemma3_tokenizer_json()
    docs = tokenizer_corpus.corpus(seed=0, size=CORPUS_BYTES)
    texts = refs.write_jsonl(work_dir() / "tokenizer" / "corpus-s0.jsonl", docs)
    return path, Tokenizer.from_file(str(path)), docs, texts


def test_corpus_is_big_and_varied(setup):
    _, _, docs, _ = setup
    text = "".join(docs)
    assert len(text.encode("utf-8")) >= 1_000_000
    for probe in ["<start_of_turn>", "Привет", "你好", "😀", "def ", " " * 64, "\t", "\u200d"]:
        assert probe in text, probe


@pytest.mark.parametrize("parse_special", [True, False])
def test_encode_equals_tokenizers(setup, parse_special):
    path, ref, docs, texts = setup
    ours = refs.lumen_encode_many(lumen_bin(), path, texts, parse_special)
    assert len(ours) == len(docs)
    if not parse_special:
        ref.encode_special_tokens = True  # tokenizers' "special-token text is ordinary text"
    try:
        expected = [e.ids for e in ref.encode_batch(docs, add_special_tokens=False)]
    finally:
        ref.encode_special_tokens = False
    bad = [i for i in range(len(docs)) if ours[i] != expected[i]]
    assert not bad, f"{len(bad)} of {len(docs)} texts differ; text {bad[0]}: {refs.first_difference(ours[bad[0]], expected[bad[0]])}"
    if parse_special:
        record("tokenizer", "hf_tokenizers", dict(texts=len(docs), bytes=sum(len(d.encode()) for d in docs),
                                                   tokens=sum(map(len, ours)), mismatches=0))


def test_decode_equals_tokenizers_and_round_trips(setup):
    path, ref, docs, texts = setup
    ids = [e.ids for e in ref.encode_batch(docs, add_special_tokens=False)]
    ids_file = refs.write_jsonl(work_dir() / "tokenizer" / "corpus-s0-ids.jsonl", ids)
    ours = refs.lumen_decode_many(lumen_bin(), path, ids_file)
    expected = ref.decode_batch(ids, skip_special_tokens=False)
    bad = [i for i in range(len(docs)) if ours[i] != expected[i]]
    assert not bad, f"{len(bad)} decodes differ; text {bad[0]}: {ours[bad[0]][:200]!r} vs {expected[bad[0]][:200]!r}"
    for i, doc in enumerate(docs):
        assert ours[i] == doc.replace("\u2581", " "), f"text {i} does not round-trip"


def test_decode_skip_special(setup):
    path, ref, _, _ = setup
    ids = [[2, 105, 2364, 107, 9259, 106, 1, 236743, 262144]]
    ids_file = refs.write_jsonl(work_dir() / "tokenizer" / "skip-special.jsonl", ids)
    assert refs.lumen_decode_many(lumen_bin(), path, ids_file, skip_special=True) == ref.decode_batch(ids, skip_special_tokens=True)


def test_bad_input_is_one_error_line(setup):
    path = setup[0]
    d = work_dir() / "tokenizer"
    bad_text = d / "bad-utf8.txt"
    bad_text.write_bytes(b"fine \xc3\x28 then")
    broken = d / "broken-tokenizer.json"
    broken.write_text('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}')
    for args, start in [(["tokenize", "-m", path, "--file", bad_text], f"lumen: error: {bad_text}: invalid UTF-8 at byte 5"),
                        (["detokenize", "-m", path, "2,300000"], "lumen: error: token id 300000 is outside the vocabulary"),
                        (["tokenize", "-m", broken, "a"], f"lumen: error: {broken}: model.merges[0]")]:
        cp = run_lumen(*args)
        assert cp.returncode == 1 and cp.stdout == "", describe(cp)
        assert cp.stderr.startswith(start) and cp.stderr.count("\n") == 1, describe(cp)
