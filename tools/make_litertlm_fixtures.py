"""Synthetic LiteRT-LM packages and TFLite models, written by Google's own Python tools.

The real fixtures in ../shared/fixtures/litertlm hold only string metadata, no quantized
tensors and no buffers stored after the FlatBuffer. These files cover the rest, laid out by
the reference writers rather than by Lumen:
  - TFLite models: the `tflite` package's generated FlatBuffer builders (per-channel INT4 and
    per-tensor INT8 quantization, inline buffers and buffers at offsets past the FlatBuffer,
    two signatures), plus broken variants (buffer past the end, tensor buffer index out of
    range, bad quantized dimension);
  - packages: litert-lm-builder's LitertLmFileBuilder (system metadata of all 12 value
    types, a fully populated LlmMetadata proto, TFLite model and weights sections, SP and HF
    tokenizers, generic data);
  - a version 1.1 header, whose numeric values are FlatBuffer structs, written with the
    `flatbuffers` builder (litert-lm-builder only writes the current layout).
Test tool only (pinned in tools/requirements-test.txt); nothing on the run path uses it.
"""

import json
import struct
import zlib

import flatbuffers
import tflite
from litert_lm_builder import litertlm_builder as lb
from litert_lm_builder.runtime.proto import llm_metadata_pb2

# ---------------------------------------------------------------------------- TFLite

# name, type, shape, quantization (scales, zero points, dim) or None, data bytes or None,
# stored at an offset past the FlatBuffer?
INT4_DATA = bytes(range(12))  # [4, 6] int4 -> 12 bytes
TENSORS = [
    ("tokens", tflite.TensorType.INT32, [1, 8], None, None, False),
    ("w_int4", tflite.TensorType.INT4, [4, 6], ([0.0625, 0.125, 0.25, 0.5], [8, 8, 8, 8], 0), INT4_DATA, True),
    ("w_int8", tflite.TensorType.INT8, [3, 2], ([0.5], [-3], 0), bytes([1, 2, 3, 4, 5, 6]), False),
    ("bias", tflite.TensorType.FLOAT32, [3], None, struct.pack("<3f", 1.0, 2.0, 3.0), False),
    ("emb", tflite.TensorType.BFLOAT16, [2, 4], None, bytes(range(100, 116)), True),
    ("logits", tflite.TensorType.FLOAT32, [1, 3], None, None, False),
    # Data in the package's TFLiteWeights section: external buffer 1, group "tflite_weights".
    ("ext_w", tflite.TensorType.INT8, [4, 4], None, None, False),
]
EXTERNAL = {"tensor": "ext_w", "id": 1, "offset": 256, "length": 16}


def _ints(builder, start_fn, values, prepend):
    start_fn(builder, len(values))
    for v in reversed(values):
        prepend(v)
    return builder.EndVector()


def _tflite_flatbuffer(offsets, bad):
    """The model FlatBuffer; `offsets`: file offset of each offset-stored buffer's data."""
    b = flatbuffers.Builder(1024)
    # Buffers: 0 is the empty sentinel; one per tensor with data, in tensor order.
    buffer_refs = [None]
    tensor_buffer = []
    for name, _, _, _, data, at_offset in TENSORS:
        if data is None:
            tensor_buffer.append(0)
            continue
        tensor_buffer.append(len(buffer_refs))
        if at_offset:
            buffer_refs.append(("offset", name, len(data)))
        else:
            buffer_refs.append(("inline", name, data))
    built_buffers = []
    for ref in buffer_refs:
        if ref is None:
            tflite.BufferStart(b)
            built_buffers.append(tflite.BufferEnd(b))
        elif ref[0] == "inline":
            vec = b.CreateByteVector(ref[2])
            tflite.BufferStart(b)
            tflite.BufferAddData(b, vec)
            built_buffers.append(tflite.BufferEnd(b))
        else:
            offset = offsets.get(ref[1], 0xFFFFFFFF)
            size = ref[2]
            if bad == "offset_past_end" and ref[1] == "emb":
                offset += 4096
            tflite.BufferStart(b)
            tflite.BufferAddOffset(b, offset)
            tflite.BufferAddSize(b, size)
            built_buffers.append(tflite.BufferEnd(b))

    def tensors_for(prefix):
        out = []
        for i, (name, ttype, shape, quant, _, _) in enumerate(TENSORS):
            nm = b.CreateString(prefix + name)
            shp = _ints(b, tflite.TensorStartShapeVector, shape, b.PrependInt32)
            q = None
            if quant is not None:
                scales, zps, dim = quant
                sv = _ints(b, tflite.QuantizationParametersStartScaleVector, scales, b.PrependFloat32)
                zv = _ints(b, tflite.QuantizationParametersStartZeroPointVector, zps, b.PrependInt64)
                tflite.QuantizationParametersStart(b)
                tflite.QuantizationParametersAddScale(b, sv)
                tflite.QuantizationParametersAddZeroPoint(b, zv)
                qdim = 5 if (bad == "qdim" and name == "w_int4") else dim
                tflite.QuantizationParametersAddQuantizedDimension(b, qdim)
                q = tflite.QuantizationParametersEnd(b)
            b.StartObject(11)  # TensorStart, plus field 10 external_buffer (newer schema)
            tflite.TensorAddShape(b, shp)
            tflite.TensorAddType(b, ttype)
            buf = tensor_buffer[i]
            if bad == "buffer_index" and name == "bias":
                buf = 99
            tflite.TensorAddBuffer(b, buf)
            tflite.TensorAddName(b, nm)
            if q is not None:
                tflite.TensorAddQuantization(b, q)
            if name == EXTERNAL["tensor"]:
                b.PrependUint32Slot(10, EXTERNAL["id"], 0)
            out.append(tflite.TensorEnd(b))
        return out

    subgraphs = []
    for sg_name, prefix in (("decode", "decode_"), ("prefill_8", "prefill_")):
        tensors = tensors_for(prefix)
        tflite.SubGraphStartTensorsVector(b, len(tensors))
        for t in reversed(tensors):
            b.PrependUOffsetTRelative(t)
        tv = b.EndVector()
        iv = _ints(b, tflite.SubGraphStartInputsVector, [0], b.PrependInt32)
        ov = _ints(b, tflite.SubGraphStartOutputsVector, [5], b.PrependInt32)
        nm = b.CreateString(sg_name)
        tflite.SubGraphStart(b)
        tflite.SubGraphAddTensors(b, tv)
        tflite.SubGraphAddInputs(b, iv)
        tflite.SubGraphAddOutputs(b, ov)
        tflite.SubGraphAddName(b, nm)
        subgraphs.append(tflite.SubGraphEnd(b))

    sigs = []
    for key, sg in (("decode", 0), ("prefill_8", 1)):
        maps = {}
        for kind, alias, index in (("in", "tokens", 0), ("out", "logits", 5)):
            n = b.CreateString(alias)
            tflite.TensorMapStart(b)
            tflite.TensorMapAddName(b, n)
            tflite.TensorMapAddTensorIndex(b, index)
            maps[kind] = tflite.TensorMapEnd(b)
        tflite.SignatureDefStartInputsVector(b, 1)
        b.PrependUOffsetTRelative(maps["in"])
        inv = b.EndVector()
        tflite.SignatureDefStartOutputsVector(b, 1)
        b.PrependUOffsetTRelative(maps["out"])
        outv = b.EndVector()
        k = b.CreateString(key)
        tflite.SignatureDefStart(b)
        tflite.SignatureDefAddInputs(b, inv)
        tflite.SignatureDefAddOutputs(b, outv)
        tflite.SignatureDefAddSignatureKey(b, k)
        tflite.SignatureDefAddSubgraphIndex(b, sg)
        sigs.append(tflite.SignatureDefEnd(b))

    def vec(start, items):
        start(b, len(items))
        for x in reversed(items):
            b.PrependUOffsetTRelative(x)
        return b.EndVector()

    bv = vec(tflite.ModelStartBuffersVector, built_buffers)
    sv = vec(tflite.ModelStartSubgraphsVector, subgraphs)
    gv = vec(tflite.ModelStartSignatureDefsVector, sigs)
    group_name = b.CreateString("tflite_weights")
    b.StartObject(1)
    b.PrependUOffsetTRelativeSlot(0, group_name, 0)
    group = b.EndObject()
    b.StartVector(4, 1, 4)
    b.PrependUOffsetTRelative(group)
    groups = b.EndVector()
    b.StartObject(5)
    b.PrependUint32Slot(0, EXTERNAL["id"], 0)
    b.PrependUint32Slot(1, 0, 0)
    offset = EXTERNAL["offset"] + (4096 if bad == "external_past_end" else 0)
    b.PrependUint64Slot(2, offset, 0)
    b.PrependUint64Slot(3, EXTERNAL["length"], 0)
    ext = b.EndObject()
    b.StartVector(4, 1, 4)
    b.PrependUOffsetTRelative(ext)
    externals = b.EndVector()
    desc = b.CreateString("Lumen synthetic test model")
    b.StartObject(10)  # ModelStart, plus fields 8/9 external_buffer_groups/external_buffers
    b.PrependUOffsetTRelativeSlot(8, groups, 0)
    b.PrependUOffsetTRelativeSlot(9, externals, 0)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddSubgraphs(b, sv)
    tflite.ModelAddDescription(b, desc)
    tflite.ModelAddBuffers(b, bv)
    tflite.ModelAddSignatureDefs(b, gv)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def make_tflite(bad=None):
    """The model bytes: FlatBuffer, then offset-stored buffer data, 16-byte aligned."""
    size = len(_tflite_flatbuffer({}, bad))
    offsets, tail, pos = {}, b"", (size + 15) // 16 * 16
    for name, _, _, _, data, at_offset in TENSORS:
        if at_offset:
            offsets[name] = pos + len(tail)
            tail += data + b"\0" * ((-len(data)) % 16)
    fb = _tflite_flatbuffer(offsets, bad)
    assert len(fb) == size, "two-pass layout must not move"
    return fb + b"\0" * (pos - size) + tail


# ---------------------------------------------------------------------------- packages

SYSTEM_METADATA = [
    ("u8", lb.DType.UINT8, 200), ("i8", lb.DType.INT8, -100), ("u16", lb.DType.UINT16, 60000),
    ("i16", lb.DType.INT16, -30000), ("u32", lb.DType.UINT32, 4000000000),
    ("i32", lb.DType.INT32, -2000000000), ("f32", lb.DType.FLOAT32, 0.5),
    ("flag", lb.DType.BOOL, True), ("name", lb.DType.STRING, "Lumen test"),
    ("u64", lb.DType.UINT64, 2**63 + 5), ("i64", lb.DType.INT64, -(2**62)),
    ("f64", lb.DType.DOUBLE, 3.25),
]


def llm_metadata():
    m = llm_metadata_pb2.LlmMetadata()
    m.start_token.token_ids.ids.append(2)
    m.stop_tokens.add().token_str = "<eos>"
    m.stop_tokens.add().token_ids.ids.extend([1, 106])
    m.prompt_templates.user.prefix = "<start_of_turn>user\n"
    m.prompt_templates.user.suffix = "<end_of_turn>\n"
    m.prompt_templates.model.prefix = "<start_of_turn>model\n"
    m.sampler_params.type = 2
    m.sampler_params.k = 64
    m.sampler_params.p = 0.95
    m.sampler_params.temperature = 1.0
    m.sampler_params.seed = 7
    m.max_num_tokens = 4096
    m.llm_model_type.gemma4.SetInParent()
    m.jinja_prompt_template = "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"
    ch = m.channels.add()
    ch.channel_name = "thought"
    ch.start = "<|channel>thought"
    ch.end = "<channel|>"
    ch.is_reasoning_channel = True
    m.suppress_tokens.ids.extend([0, 3, -1])
    m.kv_cache_init_value = -5
    m.supports_thinking = True
    m.supports_function_calling = False
    m.pad_token.token_ids.ids.append(0)
    m.min_runtime_version = "0.11.0"
    return m


def make_package(dir_path, sp_model_bytes, out_path, bad=None):
    """A package with every section kind Lumen reads; returns what went in."""
    import os

    tfl = os.path.join(dir_path, "model.tflite")
    with open(tfl, "wb") as f:
        f.write(make_tflite(bad=bad))
    weights = os.path.join(dir_path, "model.weight")
    with open(weights, "wb") as f:
        f.write(bytes(range(256)) * 4)
    meta = os.path.join(dir_path, "llm_metadata.pb")
    with open(meta, "wb") as f:
        f.write(llm_metadata().SerializeToString())
    spm = os.path.join(dir_path, "tokenizer.model")
    with open(spm, "wb") as f:
        f.write(sp_model_bytes)
    tok_json = {"version": "1.0", "added_tokens": [{"id": 0, "content": "<pad>"}],
                "model": {"type": "BPE", "vocab": {"<pad>": 0, "a": 1, "b": 2}, "merges": []}}
    hf = os.path.join(dir_path, "tokenizer.json")
    with open(hf, "w") as f:
        json.dump(tok_json, f)
    blob = os.path.join(dir_path, "blob.bin")
    with open(blob, "wb") as f:
        f.write(b"generic" * 10)

    b = lb.LitertLmFileBuilder()
    for key, dtype, value in SYSTEM_METADATA:
        b.add_system_metadata(lb.Metadata(key=key, value=value, dtype=dtype))
    b.add_llm_metadata(meta)
    b.add_tflite_model(tfl, lb.TfLiteModelType.PREFILL_DECODE,
                       additional_metadata=[lb.Metadata(key="layers", value=3, dtype=lb.DType.INT32)])
    b.add_tflite_weights(weights, lb.TfLiteModelType.PREFILL_DECODE)
    b.add_sentencepiece_tokenizer(spm)
    b.add_generic_binary_data(blob, additional_metadata=[lb.Metadata(key="ratio", value=0.25, dtype=lb.DType.FLOAT32)])
    with open(out_path, "wb") as f:
        b.build(f)
    # HF tokenizer in a package of its own: the builder allows one tokenizer per model type.
    b2 = lb.LitertLmFileBuilder()
    b2.add_hf_tokenizer(hf)
    with open(out_path + ".hf.litertlm", "wb") as f:
        b2.build(f)
    return tok_json


# ---------------------------------------------------------------------------- version 1.1

def make_v11_package(out_path):
    """Version 1.1 layout: numeric VData members are structs the union offset points at."""
    b = flatbuffers.Builder(256)

    def kv(key, vtype, value_offset):
        k = b.CreateString(key)
        b.StartObject(3)
        b.PrependUOffsetTRelativeSlot(0, k, 0)
        b.PrependUint8Slot(1, vtype, 0)
        b.PrependUOffsetTRelativeSlot(2, value_offset, 0)
        return b.EndObject()

    def struct_value(fmt_prepend, size, value):
        b.Prep(size, 0)
        fmt_prepend(value)
        return b.Offset()

    entries = []
    entries.append(kv("count", 5, struct_value(b.PrependUint32, 4, 123456)))        # UInt32
    entries.append(kv("delta", 11, struct_value(b.PrependInt64, 8, -77)))            # Int64
    entries.append(kv("scale", 7, struct_value(b.PrependFloat32, 4, 0.125)))         # Float32
    entries.append(kv("on", 8, struct_value(b.PrependBool, 1, True)))                # Bool
    s = b.CreateString("v1.1 string")
    b.StartObject(1)
    b.PrependUOffsetTRelativeSlot(0, s, 0)
    sv = b.EndObject()
    entries.append(kv("label", 9, sv))                                               # StringValue

    b.StartVector(4, len(entries), 4)
    for e in reversed(entries):
        b.PrependUOffsetTRelative(e)
    ev = b.EndVector()
    b.StartObject(1)
    b.PrependUOffsetTRelativeSlot(0, ev, 0)
    sysmeta = b.EndObject()

    b.StartObject(4)
    b.PrependUint64Slot(1, 16384, 0)
    b.PrependUint64Slot(2, 16384 + 11, 0)
    b.PrependUint8Slot(3, 1, 0)  # GenericBinaryData
    obj = b.EndObject()
    b.StartVector(4, 1, 4)
    b.PrependUOffsetTRelative(obj)
    ov = b.EndVector()
    b.StartObject(1)
    b.PrependUOffsetTRelativeSlot(0, ov, 0)
    secmeta = b.EndObject()

    b.StartObject(2)
    b.PrependUOffsetTRelativeSlot(0, sysmeta, 0)
    b.PrependUOffsetTRelativeSlot(1, secmeta, 0)
    b.Finish(b.EndObject())
    header = bytes(b.Output())
    head = b"LITERTLM" + struct.pack("<IIII", 1, 1, 0, 0) + struct.pack("<Q", 32 + len(header))
    data = head + header
    data += b"\0" * (16384 - len(data)) + b"hello v1.1!"
    with open(out_path, "wb") as f:
        f.write(data)
    return {"count": ("UInt32", 123456), "delta": ("Int64", -77), "scale": ("Float32", 0.125),
            "on": ("Bool", True), "label": ("String", "v1.1 string")}


def inflate_hf_section(section_bytes):
    size = struct.unpack("<Q", section_bytes[:8])[0]
    out = zlib.decompress(section_bytes[8:])
    assert len(out) == size
    return out
