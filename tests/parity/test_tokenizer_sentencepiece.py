"""The libsentencepiece path (`lumen tokenize -m MODEL.model`) equals Debian's spm_encode/spm_decode on models
trained here by Debian's spm_train (BPE and unigram, byte fallback, user-defined and control symbols) from a
seeded corpus; control-symbol text becomes its id only with special parsing; a broken .model is one error line."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import describe, lumen_bin, run_lumen, work_dir

import tokenizer_corpus
import tokenizer_refs as refs


def lines_without_breaks(seed: int, size: int) -> list[str]:
    docs = tokenizer_corpus.corpus(seed=seed, size=size, long_runs=False)
    out = []
    for d in docs:
        for line in d.replace("\r", "\n").split("\n"):
            line = line.strip(" ")
            if line:
                out.append(line[:3000])
    return out


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def model(request):
    spm_train = shutil.which("spm_train")
    assert spm_train, "spm_train is missing (scripts/setup --test installs Debian's sentencepiece)"
    d = work_dir() / "tokenizer" / f"spm-{request.param}"
    d.mkdir(parents=True, exist_ok=True)
    train = d / "train.txt"
    train.write_text("\n".join(lines_without_breaks(10, 300_000)) + "\n", encoding="utf-8")
    prefix = d / "m"
    cp = subprocess.run([spm_train, f"--input={train}", f"--model_prefix={prefix}", "--vocab_size=2000",
                         f"--model_type={request.param}", "--byte_fallback=true", "--character_coverage=0.98",
                         "--user_defined_symbols=<start_of_turn>,<end_of_turn>", "--control_symbols=<ctrl>",
                         "--num_threads=1", "--minloglevel=2"], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr[-2000:]
    return prefix.with_suffix(".model")


def spm(tool: str, model, stdin: str, *args) -> list[str]:
    exe = shutil.which(tool)
    assert exe, f"{tool} is missing (Debian's sentencepiece)"
    cp = subprocess.run([exe, f"--model={model}", *args], input=stdin, capture_output=True, text=True,
                        encoding="utf-8", timeout=120)
    assert cp.returncode == 0, cp.stderr[-2000:]
    return cp.stdout.split("\n")


def test_encode_and_decode_equal_spm_tools(model):
    texts = lines_without_breaks(11, 150_000)
    texts_file = refs.write_jsonl(model.parent / "texts.jsonl", texts)
    ours = refs.lumen_encode_many(lumen_bin(), model, texts_file, parse_special=False)
    expected = [[int(x) for x in line.split()] for line in spm("spm_encode", model, "\n".join(texts) + "\n", "--output_format=id")[:len(texts)]]
    bad = [i for i in range(len(texts)) if ours[i] != expected[i]]
    assert not bad, f"{len(bad)} of {len(texts)} differ; {texts[bad[0]][:80]!r}: {refs.first_difference(ours[bad[0]], expected[bad[0]])}"
    assert sum(map(len, ours)) > 20_000
    ids_file = refs.write_jsonl(model.parent / "ids.jsonl", ours)
    decoded = refs.lumen_decode_many(lumen_bin(), model, ids_file)
    expected_text = spm("spm_decode", model, "\n".join(" ".join(map(str, ids)) for ids in ours) + "\n", "--input_format=id")
    assert decoded == expected_text[:len(texts)]


def test_control_symbols_parse_only_when_asked(model):
    ctrl = int(spm("spm_encode", model, "x\n", "--output_format=id", "--extra_options=bos")[0].split()[0])  # <s>
    cp = run_lumen("tokenize", "-m", model, "ab<s>cd<ctrl>")
    assert cp.returncode == 0, describe(cp)
    ids = refs.read_jsonl(cp.stdout)[0]
    assert ctrl in ids
    plain = refs.read_jsonl(run_lumen("tokenize", "-m", model, "--no-special", "ab<s>cd<ctrl>").stdout)[0]
    assert ctrl not in plain
    expected = [int(x) for x in spm("spm_encode", model, "ab<s>cd<ctrl>\n", "--output_format=id")[0].split()]
    assert plain == expected
    # user-defined symbols are the model's own business: whole either way
    turn = refs.read_jsonl(run_lumen("tokenize", "-m", model, "--no-special", "<start_of_turn>hi").stdout)[0]
    assert turn == [int(x) for x in spm("spm_encode", model, "<start_of_turn>hi\n", "--output_format=id")[0].split()]
    text = run_lumen("detokenize", "-m", model, ",".join(map(str, ids)))
    assert text.returncode == 0 and "<s>" in text.stdout and "<ctrl>" in text.stdout


def test_broken_model_is_one_error_line(model):
    broken = model.parent / "broken.model"
    broken.write_bytes(model.read_bytes()[:200])
    cp = run_lumen("tokenize", "-m", broken, "hello")
    assert cp.returncode == 1, describe(cp)
    lines = cp.stderr.strip().split("\n")
    assert len(lines) == 1 and lines[0].startswith(f"lumen: error: {broken}: "), describe(cp)
    assert cp.stdout == ""
