"""`lumen inspect --json` on LiteRT-LM packages and TFLite models, against Google's readers.

References (pinned in tools/requirements-test.txt):
  - litert-lm-builder 0.18.1: LiteRT-LM's own header schema (flatc-generated Python) and its
    peek tool's value decoding; its LlmMetadata protobuf classes; its package builder;
  - tflite 2.18.0: the flatc-generated Python for TFLite's schema.fbs;
  - zlib + tokenizers for the HF tokenizer sections.
Inputs: every real file in ../shared/fixtures/litertlm, plus synthetic files written by those
tools (tools/make_litertlm_fixtures.py) for what the real files lack: numeric metadata,
quantized tensors, buffers past the FlatBuffer, every LlmMetadata field, all versions 1.1-1.9.
Broken files must give one "lumen: error:" line naming the file and the field.
"""
from __future__ import annotations

import json
import shutil
import struct
import zlib
from pathlib import Path

import flatbuffers
import pytest
import tflite
from google.protobuf import json_format
from litert_lm_builder import litertlm_header_schema_py_generated as schema
from litert_lm_builder import litertlm_peek
from litert_lm_builder.runtime.proto import llm_metadata_pb2

import make_litertlm_fixtures as mk
from conftest import describe, run_lumen, shared_dir

FIXTURES = shared_dir() / "fixtures" / "litertlm"
PACKAGES = sorted(p.name for p in FIXTURES.glob("*.litertlm"))
MODELS = sorted(p.name for p in FIXTURES.glob("*.tflite"))
TYPE_NAMES = {v: k for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}
SECTION_NAMES = {v: k for k, v in vars(schema.AnySectionDataType).items() if not k.startswith("_")}


def inspect_json(path) -> dict:
    cp = run_lumen("inspect", path, "--json")
    assert cp.returncode == 0, describe(cp)
    return json.loads(cp.stdout)


def expect_error(path, *parts):
    cp = run_lumen("inspect", path, "--json")
    assert cp.returncode == 1, describe(cp)
    lines = cp.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lumen: error: "), describe(cp)
    for p in parts:
        assert p in lines[0], describe(cp)
    assert cp.stdout == ""


# ------------------------------------------------------------------- the references

def reference_package(path: Path) -> dict:
    data = path.read_bytes()
    major, minor, patch = struct.unpack_from("<III", data, 8)
    header_end = struct.unpack_from("<Q", data, 24)[0]
    meta = schema.LiteRTLMMetaData.GetRootAs(data[32:header_end], 0)

    def pairs(n, get):
        out = []
        for i in range(n):
            kv = get(i)
            value, dtype = litertlm_peek._get_kvp_value_and_type(kv)
            if isinstance(value, bytes):
                value = value.decode()
            out.append({"key": kv.Key().decode(), "type": dtype, "value": value})
        return out

    sysm = meta.SystemMetadata()
    secs = meta.SectionMetadata()
    sections = []
    for i in range(secs.ObjectsLength()):
        o = secs.Objects(i)
        sections.append({"index": i, "data_type": SECTION_NAMES[o.DataType()], "begin_offset": o.BeginOffset(),
                         "end_offset": o.EndOffset(), "size": o.EndOffset() - o.BeginOffset(),
                         "items": pairs(o.ItemsLength(), o.Items)})
    return {"version": f"{major}.{minor}.{patch}", "header_end_offset": header_end,
            "system_metadata": pairs(sysm.EntriesLength() if sysm else 0, sysm.Entries if sysm else None),
            "sections": sections}


def reference_tflite(data: bytes) -> dict:
    m = tflite.Model.GetRootAs(bytearray(data), 0)
    buffers = []
    for i in range(m.BuffersLength()):
        b = m.Buffers(i)
        if b.DataLength():
            buffers.append(("inline", b.DataLength()))
        elif b.Offset() > 1:
            buffers.append(("offset", b.Size()))
        else:
            buffers.append(("none", 0))
    subgraphs = []
    for s in range(m.SubgraphsLength()):
        g = m.Subgraphs(s)
        tensors = []
        for t in range(g.TensorsLength()):
            T = g.Tensors(t)
            q = T.Quantization()
            quant = None
            if q is not None and (q.ScaleLength() or q.ZeroPointLength()):
                quant = {"scale": [float(x) for x in q.ScaleAsNumpy()] if q.ScaleLength() else [],
                         "zero_point": [int(x) for x in q.ZeroPointAsNumpy()] if q.ZeroPointLength() else [],
                         "quantized_dimension": q.QuantizedDimension()}
            storage, nbytes = buffers[T.Buffer()]
            # Tensor field 10 (external_buffer) is newer than the tflite package: read the slot.
            slot = T._tab.Offset(4 + 2 * 10)
            external = T._tab.Get(flatbuffers.number_types.Uint32Flags, T._tab.Pos + slot) if slot else 0
            tensors.append({"external_buffer": external, "index": t, "name": T.Name().decode(),
                            "shape": [int(x) for x in T.ShapeAsNumpy()] if T.ShapeLength() else [],
                            "type": TYPE_NAMES[T.Type()], "buffer": T.Buffer(), "storage": storage,
                            "bytes": nbytes, "quantization": quant})
        subgraphs.append({"index": s, "name": (g.Name() or b"").decode(),
                          "inputs": [int(x) for x in g.InputsAsNumpy()] if g.InputsLength() else [],
                          "outputs": [int(x) for x in g.OutputsAsNumpy()] if g.OutputsLength() else [],
                          "operators": g.OperatorsLength(), "tensors": tensors})
    sigs = []
    for i in range(m.SignatureDefsLength()):
        sd = m.SignatureDefs(i)
        sigs.append({"key": sd.SignatureKey().decode(), "subgraph_index": sd.SubgraphIndex(),
                     "inputs": [(sd.Inputs(j).Name().decode(), sd.Inputs(j).TensorIndex()) for j in range(sd.InputsLength())],
                     "outputs": [(sd.Outputs(j).Name().decode(), sd.Outputs(j).TensorIndex()) for j in range(sd.OutputsLength())]})
    return {"version": m.Version(), "subgraphs": subgraphs, "signatures": sigs, "buffers": len(buffers)}


def compare_tflite(ours: dict, data: bytes):
    ref = reference_tflite(data)
    assert ours["version"] == ref["version"]
    assert ours["buffers"]["count"] == ref["buffers"]
    assert len(ours["subgraphs"]) == len(ref["subgraphs"])
    for og, rg in zip(ours["subgraphs"], ref["subgraphs"]):
        for key in ("index", "name", "inputs", "outputs", "operators"):
            assert og[key] == rg[key], key
        assert len(og["tensors"]) == len(rg["tensors"])
        for ot, rt in zip(og["tensors"], rg["tensors"]):
            for key in ("index", "name", "shape", "type", "buffer"):
                assert ot[key] == rt[key], (rt["name"], key)
            assert ot.get("external_buffer", 0) == rt["external_buffer"], rt["name"]
            if rt["external_buffer"] and ot["storage"] == "external":  # resolved in the package
                assert rt["storage"] == "none"
            else:
                assert (ot["storage"], ot["bytes"]) == (rt["storage"], rt["bytes"]), rt["name"]
            if rt["quantization"] is None:
                assert ot["quantization"] is None, rt["name"]
            else:
                oq = ot["quantization"]
                assert oq["scale"] == pytest.approx(rt["quantization"]["scale"])
                assert oq["zero_point"] == rt["quantization"]["zero_point"]
                assert oq["quantized_dimension"] == rt["quantization"]["quantized_dimension"]
    assert len(ours["signatures"]) == len(ref["signatures"])
    for os_, rs in zip(ours["signatures"], ref["signatures"]):
        assert os_["key"] == rs["key"]
        assert os_["subgraph_index"] == rs["subgraph_index"]
        assert [(x["name"], x["tensor_index"]) for x in os_["inputs"]] == rs["inputs"]
        assert [(x["name"], x["tensor_index"]) for x in os_["outputs"]] == rs["outputs"]


def compare_package(path: Path) -> dict:
    ours = inspect_json(path)
    ref = reference_package(path)
    assert ours["format"] == "litertlm"
    assert ours["version"] == ref["version"]
    assert ours["header_end_offset"] == ref["header_end_offset"]
    assert ours["system_metadata"] == ref["system_metadata"]
    assert len(ours["sections"]) == len(ref["sections"])
    data = path.read_bytes()
    for os_, rs in zip(ours["sections"], ref["sections"]):
        for key in ("index", "data_type", "begin_offset", "end_offset", "size"):
            assert os_[key] == rs[key], (rs["index"], key)
        assert len(os_["items"]) == len(rs["items"])
        for oi, ri in zip(os_["items"], rs["items"]):
            assert (oi["key"], oi["type"]) == (ri["key"], ri["type"])
            assert oi["value"] == pytest.approx(ri["value"]) if ri["type"] in ("Float32", "Double") else oi["value"] == ri["value"]
        payload = data[rs["begin_offset"]:rs["end_offset"]]
        if rs["data_type"] == "TFLiteModel":
            compare_tflite(os_["tflite"], payload)
        elif rs["data_type"] == "LlmMetadataProto":
            msg = llm_metadata_pb2.LlmMetadata()
            msg.ParseFromString(payload)
            compare_llm_metadata(os_["llm_metadata"], msg)
        elif rs["data_type"] == "HF_Tokenizer_Zlib":
            text = mk.inflate_hf_section(payload)
            assert os_["hf_tokenizer"]["uncompressed_size"] == len(text)
            doc = json.loads(text)
            if "model" in doc:
                assert os_["hf_tokenizer"]["vocab_size"] == len(doc["model"]["vocab"])
                assert os_["hf_tokenizer"]["model_type"] == doc["model"]["type"]
            else:
                assert "vocab_size" not in os_["hf_tokenizer"]
            assert os_["hf_tokenizer"].get("added_tokens") == len(doc.get("added_tokens", []))
        elif rs["data_type"] == "SP_Tokenizer":
            assert os_["sentencepiece"]["bytes"] == len(payload)
    return ours


def compare_llm_metadata(ours: dict, msg):
    ref = json_format.MessageToDict(msg, preserving_proto_field_name=True)
    # Lumen names the model type (the oneof member) rather than nesting its message.
    if "llm_model_type" in ref:
        ref["llm_model_type"] = next(iter(ref["llm_model_type"]))
    if "kv_cache_init_value" in ref:
        ref["kv_cache_init_value"] = int(ref["kv_cache_init_value"])
    if "sampler_params" in ref:  # proto3 defaults are omitted by MessageToDict, listed by Lumen
        full = {"type": "TYPE_UNSPECIFIED", "k": 0, "p": 0.0, "temperature": 0.0, "backend": "UNSPECIFIED"}
        full.update(ref["sampler_params"])
        ref["sampler_params"] = full
        assert ours["sampler_params"].pop("p") == pytest.approx(full.pop("p"))
        assert ours["sampler_params"].pop("temperature") == pytest.approx(full.pop("temperature"))
    assert ours == ref


# ------------------------------------------------------------------- real fixtures

@pytest.mark.parametrize("name", PACKAGES)
def test_real_package_matches_litertlm_reference(name):
    compare_package(FIXTURES / name)


def test_fixture_facts():
    """The values the project docs list for these files."""
    lora = inspect_json(FIXTURES / "test_lm_lora.litertlm")
    assert lora["version"] == "1.5.0"
    assert [s["data_type"] for s in lora["sections"]] == ["LlmMetadataProto", "TFLiteModel", "SP_Tokenizer"]
    assert lora["sections"][1]["items"] == [{"key": "model_type", "type": "String", "value": "tf_lite_prefill_decode"}]
    tfl = lora["sections"][1]["tflite"]
    assert [s["key"] for s in tfl["signatures"]] == ["decode", "prefill"]
    assert "logits" in [o["name"] for o in tfl["signatures"][0]["outputs"]]
    assert lora["sections"][0]["llm_metadata"]["start_token"] == {"token_str": "<bos>"}
    hf = inspect_json(FIXTURES / "test_hf_tokenizer.litertlm")
    assert hf["version"] == "1.1.0"
    assert hf["sections"][0]["hf_tokenizer"]["uncompressed_size"] == 2104556
    assert inspect_json(FIXTURES / "small_hf_tokenizer.litertlm")["version"] == "1.2.0"
    assert inspect_json(FIXTURES / "dummy_audio_only.litertlm")["version"] == "1.3.0"
    vision = inspect_json(FIXTURES / "dummy_vision_with_adapter.litertlm")
    assert [s["items"][0]["value"] for s in vision["sections"]] == ["tf_lite_vision_encoder", "tf_lite_vision_adapter"]


@pytest.mark.parametrize("name", ["test_hf_tokenizer.litertlm"])
def test_hf_tokenizer_inflates_to_a_loadable_tokenizer(name):
    """(small_hf_tokenizer.litertlm holds a tokenizer.json without a model: JSON, not loadable.)"""
    tokenizers = pytest.importorskip("tokenizers")
    data = (FIXTURES / name).read_bytes()
    ours = inspect_json(FIXTURES / name)["sections"][0]
    text = mk.inflate_hf_section(data[ours["begin_offset"]:ours["end_offset"]])
    tok = tokenizers.Tokenizer.from_str(text.decode())  # the reference accepts the same bytes
    assert tok.get_vocab_size(with_added_tokens=False) == ours["hf_tokenizer"]["vocab_size"]


@pytest.mark.parametrize("name", MODELS)
def test_real_tflite_matches_reference(name):
    ours = inspect_json(FIXTURES / name)
    assert ours["format"] == "tflite"
    compare_tflite(ours, (FIXTURES / name).read_bytes())


def test_text_output_lists_sections_and_signatures():
    cp = run_lumen("inspect", FIXTURES / "test_lm_lora.litertlm")
    assert cp.returncode == 0, describe(cp)
    for needle in ("version:         1.5.0", "section 1: TFLiteModel [32768, 116052)",
                   "signature 'prefill' (subgraph 1)", "SentencePiece model: 352 bytes"):
        assert needle in cp.stdout


# ------------------------------------------------------------------- synthetic files

@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    d = tmp_path_factory.mktemp("litertlm")
    lora = (FIXTURES / "test_lm_lora.litertlm").read_bytes()
    sp = lora[131072:131424]
    pkg = d / "synthetic.litertlm"
    tok_json = mk.make_package(str(d), sp, str(pkg))
    return d, pkg, tok_json


def test_synthetic_package_every_value_type_and_section(synthetic):
    _, pkg, _ = synthetic
    ours = compare_package(pkg)
    assert [m["type"] for m in ours["system_metadata"][:12]] == [  # the builder appends uuid, timestamp
        "UInt8", "Int8", "UInt16", "Int16", "UInt32", "Int32", "Float32", "Bool", "String", "UInt64", "Int64", "Double"]
    assert ours["system_metadata"][9]["value"] == 2**63 + 5
    types = [s["data_type"] for s in ours["sections"]]
    assert types == ["LlmMetadataProto", "TFLiteModel", "TFLiteWeights", "SP_Tokenizer", "GenericBinaryData"]
    meta = ours["sections"][0]["llm_metadata"]
    assert meta["llm_model_type"] == "gemma4"
    assert meta["suppress_tokens"] == {"ids": [0, 3, -1]}
    assert meta["kv_cache_init_value"] == -5


def test_synthetic_quantized_tensors_and_offset_buffers(synthetic):
    d, pkg, _ = synthetic
    tfl = d / "model.tflite"
    ours = inspect_json(tfl)
    compare_tflite(ours, tfl.read_bytes())
    t = {x["name"]: x for x in ours["subgraphs"][0]["tensors"]}
    w4 = t["decode_w_int4"]
    assert (w4["type"], w4["storage"], w4["bytes"]) == ("INT4", "offset", 12)
    assert w4["quantization"]["scale"] == [0.0625, 0.125, 0.25, 0.5]
    assert w4["quantization"]["zero_point"] == [8, 8, 8, 8]
    data = tfl.read_bytes()
    assert data[w4["offset"]:w4["offset"] + 12] == mk.INT4_DATA  # the offset is where the bytes are
    assert t["decode_w_int8"]["quantization"]["zero_point"] == [-3]
    assert t["decode_emb"]["storage"] == "offset"
    assert ours["buffers"] == {"count": 5, "inline": 2, "offset": 2}
    assert ours["external_buffer_groups"] == ["tflite_weights"]
    assert ours["external_buffers"] == [{"id": 1, "group": 0, "offset": 256, "length": 16, "packing": ""}]
    assert t["decode_ext_w"]["external_buffer"] == 1
    # The same model inside the package: offsets are relative to the section; the external
    # tensor resolves into the TFLiteWeights section.
    pj = inspect_json(pkg)
    sec = pj["sections"][1]
    tensors = {x["name"]: x for x in sec["tflite"]["subgraphs"][0]["tensors"]}
    assert tensors["decode_w_int4"]["offset"] == w4["offset"]
    ext = tensors["decode_ext_w"]
    weights = pj["sections"][2]
    assert weights["data_type"] == "TFLiteWeights"
    assert (ext["storage"], ext["bytes"], ext["file_offset"]) == ("external", 16, weights["begin_offset"] + 256)
    assert pkg.read_bytes()[ext["file_offset"]:ext["file_offset"] + 16] == bytes(range(16))


def test_external_weights_past_the_section(tmp_path):
    lora = (FIXTURES / "test_lm_lora.litertlm").read_bytes()
    pkg = tmp_path / "bad_external.litertlm"
    mk.make_package(str(tmp_path), lora[131072:131424], str(pkg), bad="external_past_end")
    expect_error(pkg, "section 2 (TFLiteWeights)", "decode_ext_w", "runs past the section's end")


@pytest.mark.parametrize("minor", range(2, 10))
def test_versions_1_2_to_1_9(synthetic, tmp_path, minor):
    _, pkg, _ = synthetic
    data = bytearray(pkg.read_bytes())
    struct.pack_into("<I", data, 12, minor)
    f = tmp_path / f"v1_{minor}.litertlm"
    f.write_bytes(bytes(data))
    ours = compare_package(f)
    assert ours["version"] == f"1.{minor}.0"


def test_version_1_1_numeric_structs(tmp_path):
    f = tmp_path / "v11.litertlm"
    expected = mk.make_v11_package(str(f))
    ours = inspect_json(f)
    assert ours["version"] == "1.1.0"
    got = {m["key"]: (m["type"], m["value"]) for m in ours["system_metadata"]}
    assert got == expected
    assert ours["sections"][0]["data_type"] == "GenericBinaryData"
    assert (ours["sections"][0]["begin_offset"], ours["sections"][0]["end_offset"]) == (16384, 16395)


def test_hf_tokenizer_package(synthetic):
    _, pkg, tok_json = synthetic
    hf = Path(str(pkg) + ".hf.litertlm")
    ours = compare_package(hf)
    assert ours["sections"][0]["hf_tokenizer"]["vocab_size"] == len(tok_json["model"]["vocab"])


# ------------------------------------------------------------------- broken files

@pytest.mark.parametrize("bad,parts", [
    ("offset_past_end", ["buffers[4]", "runs past the end"]),
    ("buffer_index", ["decode_bias", "buffer 99 out of range"]),
    ("qdim", ["decode_w_int4", "quantized_dimension 5"]),
])
def test_broken_tflite(tmp_path, bad, parts):
    f = tmp_path / f"{bad}.tflite"
    f.write_bytes(mk.make_tflite(bad=bad))
    expect_error(f, str(f), *parts)


def test_broken_packages(tmp_path):
    lora = (FIXTURES / "test_lm_lora.litertlm").read_bytes()
    cases = {
        "truncated.litertlm": (lora[:100000], ["truncated.litertlm", "section 1 (TFLiteModel)", "past the end of the file"]),
        "magic.litertlm": (b"LITERTLX" + lora[8:], ["magic.litertlm", "bad magic"]),
        "short.litertlm": (lora[:30], ["short.litertlm", "truncated"]),
    }
    for name, (data, parts) in cases.items():
        f = tmp_path / name
        f.write_bytes(data)
        expect_error(f, *parts)


# ------------------------------------------------------------------- the unsupported gate

def test_unsupported_manifest_is_refused_unless_forced(tmp_path):
    manifest = shared_dir() / "manifests" / "litert-gemma-4-12b-it.json"
    block = json.loads(manifest.read_text())["runtime"]["manifestInference"]["unsupported"]
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(manifest, model / "config.json")
    for cmd in (["run", "-m", model, "--tokens", "2", "-n", "1"],
                ["logits", "-m", model, "--tokens", "2", "--out", tmp_path / "x.npy"]):
        cp = run_lumen(*cmd)
        assert cp.returncode == 1, describe(cp)
        lines = cp.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("lumen: error: "), describe(cp)
        for part in (block["code"], block["message"], block["recommendation"], "--allow-unverified"):
            assert part in lines[0], describe(cp)
        forced = run_lumen(*cmd, "--allow-unverified")
        assert forced.returncode == 1 and "refused" not in forced.stderr, describe(forced)  # fails later: no weights
    assert not (tmp_path / "x.npy").exists()
    shown = inspect_json(manifest)
    assert shown["unsupported"]["code"] == block["code"]
