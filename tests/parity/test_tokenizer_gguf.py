"""The GGUF tokenizer (`lumen tokenize -m gemma-3-270m-q4_k_m.gguf`, from its tokenizer.ggml.* metadata) equals
transformers' tokenizer built from the same file (AutoTokenizer.from_pretrained(..., gguf_file=...)) on >= 1 MB
of varied text (seed 2), with and without special-token parsing, and decodes alike. That tokenizer is not the
tokenizer.json one: transformers rebuilds the merges from the vocabulary in file order, so some texts get other
ids; the test shows both sides agree on which."""
from __future__ import annotations

import pytest
from conftest import lumen_bin, record, work_dir

import tokenizer_corpus
import tokenizer_refs as refs


@pytest.fixture(scope="module")
def setup():
    ref = refs.transformers_gguf_backend(work_dir())
    docs = tokenizer_corpus.corpus(seed=2, size=1_050_000)
    texts = refs.write_jsonl(work_dir() / "tokenizer" / "corpus-s2.jsonl", docs)
    return refs.gguf_path(), ref, docs, texts


@pytest.mark.parametrize("parse_special", [True, False])
def test_encode_equals_transformers_gguf(setup, parse_special):
    gguf, ref, docs, texts = setup
    ours = refs.lumen_encode_many(lumen_bin(), gguf, texts, parse_special)
    ref.encode_special_tokens = not parse_special
    try:
        expected = [e.ids for e in ref.encode_batch(docs, add_special_tokens=False)]
    finally:
        ref.encode_special_tokens = False
    bad = [i for i in range(len(docs)) if ours[i] != expected[i]]
    assert not bad, f"{len(bad)} of {len(docs)} texts differ; text {bad[0]}: {refs.first_difference(ours[bad[0]], expected[bad[0]])}"
    if parse_special:
        from tokenizers import Tokenizer

        json_ref = Tokenizer.from_file(str(refs.gemma3_tokenizer_json()))
        differ = sum(e.ids != o for e, o in zip(json_ref.encode_batch(docs, add_special_tokens=False), ours))
        record("tokenizer", "transformers_gguf", dict(texts=len(docs), bytes=sum(len(d.encode()) for d in docs),
                                                       tokens=sum(map(len, ours)), mismatches=0,
                                                       texts_tokenized_differently_by_tokenizer_json=differ))


def test_decode_equals_transformers_gguf(setup):
    gguf, ref, docs, _ = setup
    ids = [e.ids for e in ref.encode_batch(docs[:40], add_special_tokens=False)]
    ids_file = refs.write_jsonl(work_dir() / "tokenizer" / "corpus-s2-ids.jsonl", ids)
    ours = refs.lumen_decode_many(lumen_bin(), gguf, ids_file)
    assert ours == ref.decode_batch(ids, skip_special_tokens=False)

