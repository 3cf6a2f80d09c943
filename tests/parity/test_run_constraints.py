"""`lumen run --json-schema FILE` / `--grammar FILE` on the default model (Gemma 3 270M).

The CLI side of constrained decoding (the server side: test_structured_output.py): the answer
held to a JSON Schema parses and validates with the `jsonschema` package, greedy and sampled; a
GBNF grammar's answer is a sentence of its language; a schema Lumen cannot compile is one line
naming the file and the schema path, exit 1, nothing generated.
"""
from __future__ import annotations

import json

import jsonschema
import pytest

from conftest import REPO, describe, run_lumen

MODEL = REPO / "models" / "gemma-3-270m-q4_k_m.gguf"
SCHEMA = {"type": "object",
          "properties": {"city": {"type": "string", "maxLength": 20},
                         "population": {"type": "integer"},
                         "capital": {"type": "boolean"},
                         "districts": {"type": "array", "items": {"type": "string", "maxLength": 12},
                                       "minItems": 1, "maxItems": 3}},
          "required": ["city", "population", "capital", "districts"], "additionalProperties": False}


@pytest.fixture(scope="module", autouse=True)
def model():
    if not MODEL.is_file():
        pytest.fail(f"{MODEL} is missing: run scripts/setup (it installs the default model)")


@pytest.mark.parametrize("sampling", [["--temp", "0"], ["--temp", "1", "--seed", "7"]])
def test_json_schema_answer_validates(sampling, tmp_path):
    schema = tmp_path / "city.json"
    schema.write_text(json.dumps(SCHEMA))
    cp = run_lumen("run", "-m", MODEL, "-p", "Describe Paris as JSON.", "--json-schema", schema, "-n", "160", *sampling)
    assert cp.returncode == 0, describe(cp)
    jsonschema.validate(json.loads(cp.stdout), SCHEMA)


def test_grammar_answer_is_in_the_language(tmp_path):
    grammar = tmp_path / "yesno.gbnf"
    grammar.write_text('root ::= ("yes" | "no") "."\n')
    cp = run_lumen("run", "-m", MODEL, "-p", "Is Paris in France?", "--grammar", grammar, "-n", "8", "--temp", "0")
    assert cp.returncode == 0, describe(cp)
    assert cp.stdout.strip() in ("yes.", "no."), cp.stdout


def test_schema_it_cannot_compile_is_one_line_naming_the_path(tmp_path):
    schema = tmp_path / "pattern.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"a": {"type": "string", "pattern": "[a-z]+"}}}))
    cp = run_lumen("run", "-m", MODEL, "-p", "x", "--json-schema", schema, "-n", "8")
    assert cp.returncode == 1, describe(cp)
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and str(schema) in lines[0] and "#/properties/a/pattern" in lines[0], cp.stderr
    assert cp.stdout == "", cp.stdout
