#include "formats/tflite.h"

#include <cstring>
#include <sstream>

#include "base/dtype.h"
#include "base/error.h"
#include "formats/flatbuffer.h"

namespace lumen::formats {

namespace {

std::string tensor_path(size_t subgraph, size_t index) {
  return "subgraphs[" + std::to_string(subgraph) + "].tensors[" + std::to_string(index) + "]";
}

template <typename T>
std::vector<T> scalars(const fb::Vector& v) {
  std::vector<T> out(v.size());
  for (uint32_t i = 0; i < v.size(); ++i) out[i] = v.scalar<T>(i);
  return out;
}

std::string str(std::optional<std::string_view> s) { return s ? std::string(*s) : std::string(); }

std::optional<TfliteQuantization> read_quantization(const fb::Table& t) {
  TfliteQuantization q;
  q.min = scalars<float>(t.vector(0, 4, "min"));
  q.max = scalars<float>(t.vector(1, 4, "max"));
  q.scale = scalars<float>(t.vector(2, 4, "scale"));
  q.zero_point = scalars<int64_t>(t.vector(3, 8, "zero_point"));
  q.details_type = t.scalar<uint8_t>(4, 0, "details_type");
  q.quantized_dimension = t.scalar<int32_t>(6, 0, "quantized_dimension");
  if (q.details_type == 2) {
    if (auto d = t.union_table(5, "details")) {
      q.block_scales = d->scalar<int32_t>(0, 0, "scales");
      q.block_zero_points = d->scalar<int32_t>(1, 0, "zero_points");
      q.block_size = d->scalar<int32_t>(2, 0, "block_size");
    }
  }
  if (q.scale.empty() && q.zero_point.empty() && q.min.empty() && q.max.empty() && q.details_type == 0)
    return std::nullopt;
  return q;
}

void check_quantization(const fb::Buffer& buf, const std::string& path, const TfliteTensor& t) {
  const TfliteQuantization& q = *t.quantization;
  if (!q.zero_point.empty() && q.zero_point.size() != q.scale.size()) {
    buf.fail(path + ".quantization", std::to_string(q.scale.size()) + " scales but " +
                                         std::to_string(q.zero_point.size()) + " zero points");
  }
  if (q.per_channel()) {
    if (q.quantized_dimension < 0 || size_t(q.quantized_dimension) >= t.shape.size()) {
      buf.fail(path + ".quantization", "quantized_dimension " + std::to_string(q.quantized_dimension) +
                                           " outside the tensor's rank " + std::to_string(t.shape.size()));
    }
    const int32_t channels = t.shape[size_t(q.quantized_dimension)];
    if (channels != int32_t(q.scale.size())) {
      buf.fail(path + ".quantization", std::to_string(q.scale.size()) + " scales for dimension " +
                                           std::to_string(q.quantized_dimension) + " of size " +
                                           std::to_string(channels));
    }
  }
}

}  // namespace

const char* tflite_type_name(TfliteType type) {
  static const char* kNames[] = {"FLOAT32", "FLOAT16", "INT32", "UINT8", "INT64", "STRING",
                                 "BOOL", "INT16", "COMPLEX64", "INT8", "FLOAT64", "COMPLEX128",
                                 "UINT64", "RESOURCE", "VARIANT", "UINT32", "UINT16", "INT4",
                                 "BFLOAT16", "INT2", "UINT4", "FLOAT8_E4M3FN", "FLOAT8_E5M2"};
  const int i = int(type);
  return i >= 0 && i < int(std::size(kNames)) ? kNames[i] : nullptr;
}

int tflite_type_bits(TfliteType type) {
  switch (type) {
    case TfliteType::FLOAT64: case TfliteType::INT64: case TfliteType::UINT64:
    case TfliteType::COMPLEX64: return 64;
    case TfliteType::COMPLEX128: return 128;
    case TfliteType::FLOAT32: case TfliteType::INT32: case TfliteType::UINT32: return 32;
    case TfliteType::FLOAT16: case TfliteType::BFLOAT16: case TfliteType::INT16:
    case TfliteType::UINT16: return 16;
    case TfliteType::INT8: case TfliteType::UINT8: case TfliteType::BOOL:
    case TfliteType::FLOAT8_E4M3FN: case TfliteType::FLOAT8_E5M2: return 8;
    case TfliteType::INT4: case TfliteType::UINT4: return 4;
    case TfliteType::INT2: return 2;
    case TfliteType::STRING: case TfliteType::RESOURCE: case TfliteType::VARIANT: return 0;
  }
  return 0;
}

uint64_t TfliteModel::expected_bytes(const TfliteTensor& tensor) {
  const int bits = tflite_type_bits(tensor.type);
  if (bits == 0) return 0;
  constexpr uint64_t kAbsurd = uint64_t(1) << 50;  // more elements than any file can hold
  uint64_t n = 1;
  for (int32_t d : tensor.shape) {
    if (d < 0) return 0;  // dynamic: not checkable
    if (d != 0 && n > kAbsurd / uint64_t(d)) return UINT64_MAX;  // can never match a buffer
    n *= uint64_t(d);
  }
  return (n * uint64_t(bits) + 7) / 8;  // sub-byte types pack, the last byte padded
}

TfliteModel TfliteModel::parse(const std::byte* data, size_t size, const std::string& where) {
  TfliteModel m;
  m.data_ = data;
  m.size_ = size;
  m.where_ = where;
  const fb::Buffer buf{data, size, where};
  if (size < 8) buf.fail("", "too short for a TFLite model (" + std::to_string(size) + " bytes)");
  if (std::memcmp(data + 4, "TFL3", 4) != 0) {
    buf.fail("", "not a TFLite model: identifier " +
                     in_quotes(std::string_view(reinterpret_cast<const char*>(data + 4), 4)) +
                     " at bytes 4-7, expected 'TFL3'");
  }
  const fb::Table root = fb::Table::root(buf, 0, "");
  m.version = root.scalar<uint32_t>(0, 0, "version");
  m.description = str(root.string(3, "description"));

  // Buffers: inline data, or offset/size past the FlatBuffer (relative to the model start).
  // Lists grow as their elements are decoded, never to a count read from the file: a 4-byte
  // offset slot would otherwise cost a TfliteTensor (~200 bytes) before any check.
  const fb::Vector buffers = root.vector(4, 4, "buffers");
  for (uint32_t i = 0; i < buffers.size(); ++i) {
    const fb::Table b = buffers.table(i);
    TfliteBuffer& out = m.buffers.emplace_back();
    const fb::Vector inline_data = b.vector(0, 1, "data");
    const uint64_t offset = b.scalar<uint64_t>(1, 0, "offset");
    const uint64_t bytes = b.scalar<uint64_t>(2, 0, "size");
    if (!inline_data.empty()) {
      out = {BufferStorage::Inline, inline_data.data_pos(), inline_data.size()};
    } else if (offset > 1) {
      if (offset > size || bytes > size - offset) {
        buf.fail(b.path(), "data at offset " + std::to_string(offset) + " (" + std::to_string(bytes) +
                               " bytes) runs past the end of the " + std::to_string(size) +
                               "-byte model");
      }
      out = {BufferStorage::Offset, offset, bytes};
    }
  }

  const fb::Vector groups = root.vector(8, 4, "external_buffer_groups");
  for (uint32_t i = 0; i < groups.size(); ++i)
    m.external_buffer_groups.push_back(str(groups.table(i).string(0, "name")));
  const fb::Vector externals = root.vector(9, 4, "external_buffers");
  for (uint32_t i = 0; i < externals.size(); ++i) {
    const fb::Table e = externals.table(i);
    TfliteExternalBuffer x;
    x.id = e.scalar<uint32_t>(0, 0, "id");
    x.group = e.scalar<uint32_t>(1, 0, "group");
    x.offset = e.scalar<uint64_t>(2, 0, "offset");
    x.length = e.scalar<uint64_t>(3, 0, "length");
    x.packing = str(e.string(4, "packing"));
    if (x.group >= m.external_buffer_groups.size()) {
      buf.fail(e.child("group"), "group " + std::to_string(x.group) + " out of range (" +
                                     std::to_string(m.external_buffer_groups.size()) + " groups)");
    }
    m.external_buffers.push_back(std::move(x));
  }

  const fb::Vector subgraphs = root.vector(2, 4, "subgraphs");
  for (uint32_t s = 0; s < subgraphs.size(); ++s) {
    const fb::Table g = subgraphs.table(s);
    TfliteSubgraph& sg = m.subgraphs.emplace_back();
    sg.name = str(g.string(4, "name"));
    sg.num_operators = g.vector(3, 4, "operators").size();
    const fb::Vector tensors = g.vector(0, 4, "tensors");
    for (uint32_t i = 0; i < tensors.size(); ++i) {
      const fb::Table t = tensors.table(i);
      TfliteTensor& tensor = sg.tensors.emplace_back();
      tensor.name = str(t.string(3, "name"));
      // Built only when something is wrong: models have thousands of tensors.
      auto path = [&] { return tensor_path(s, i) + " " + in_quotes(tensor.name); };
      tensor.shape = scalars<int32_t>(t.vector(0, 4, "shape"));
      tensor.shape_signature = scalars<int32_t>(t.vector(7, 4, "shape_signature"));
      const int8_t type = t.scalar<int8_t>(1, 0, "type");
      tensor.type = TfliteType(type);
      if (tflite_type_name(tensor.type) == nullptr)
        buf.fail(path(), "unknown tensor type " + std::to_string(type));
      tensor.buffer = t.scalar<uint32_t>(2, 0, "buffer");
      tensor.is_variable = t.scalar<uint8_t>(5, 0, "is_variable") != 0;
      tensor.external_buffer = t.scalar<uint32_t>(10, 0, "external_buffer");
      if (tensor.buffer >= m.buffers.size()) {
        buf.fail(path(), "buffer " + std::to_string(tensor.buffer) + " out of range (" +
                           std::to_string(m.buffers.size()) + " buffers)");
      }
      const TfliteBuffer& b = m.buffers[tensor.buffer];
      const uint64_t want = expected_bytes(tensor);
      if (b.storage != BufferStorage::Empty && want != 0 && b.size != want) {
        buf.fail(path(), "buffer " + std::to_string(tensor.buffer) + " holds " + std::to_string(b.size) +
                           " bytes, a " + tflite_type_name(tensor.type) + " tensor of this shape needs " +
                           std::to_string(want));
      }
      if (tensor.external_buffer != 0) {
        bool found = false;
        for (const auto& x : m.external_buffers) found = found || x.id == tensor.external_buffer;
        if (!found) buf.fail(path(), "external_buffer " + std::to_string(tensor.external_buffer) + " not defined");
      }
      if (auto q = t.table(4, "quantization")) {
        tensor.quantization = read_quantization(*q);
        if (tensor.quantization) check_quantization(buf, path(), tensor);
      }
    }
    auto indices = [&](const fb::Vector& v, std::vector<int32_t>& out) {
      out = scalars<int32_t>(v);
      for (int32_t i : out) {
        if (i < 0 || size_t(i) >= sg.tensors.size()) {
          buf.fail(v.path(), "tensor index " + std::to_string(i) + " out of range (" +
                                 std::to_string(sg.tensors.size()) + " tensors)");
        }
      }
    };
    indices(g.vector(1, 4, "inputs"), sg.inputs);
    indices(g.vector(2, 4, "outputs"), sg.outputs);
  }

  const fb::Vector sigs = root.vector(7, 4, "signature_defs");
  for (uint32_t i = 0; i < sigs.size(); ++i) {
    const fb::Table sd = sigs.table(i);
    TfliteSignature sig;
    sig.key = str(sd.string(2, "signature_key"));
    sig.subgraph_index = sd.scalar<uint32_t>(4, 0, "subgraph_index");
    if (sig.subgraph_index >= m.subgraphs.size()) {
      buf.fail(sd.child("subgraph_index"), "subgraph " + std::to_string(sig.subgraph_index) +
                                               " out of range (" + std::to_string(m.subgraphs.size()) +
                                               " subgraphs)");
    }
    const size_t n_tensors = m.subgraphs[sig.subgraph_index].tensors.size();
    auto maps = [&](const fb::Vector& v, std::vector<TfliteTensorRef>& out) {
      for (uint32_t k = 0; k < v.size(); ++k) {
        const fb::Table tm = v.table(k);
        TfliteTensorRef ref{str(tm.string(0, "name")), tm.scalar<uint32_t>(1, 0, "tensor_index")};
        if (ref.tensor_index >= n_tensors) {
          buf.fail(tm.child("tensor_index"), "tensor " + std::to_string(ref.tensor_index) +
                                                 " out of range (" + std::to_string(n_tensors) + " tensors)");
        }
        out.push_back(std::move(ref));
      }
    };
    maps(sd.vector(0, 4, "inputs"), sig.inputs);
    maps(sd.vector(1, 4, "outputs"), sig.outputs);
    m.signatures.push_back(std::move(sig));
  }
  return m;
}

std::string_view TfliteModel::tensor_bytes(const TfliteTensor& tensor) const {
  const TfliteBuffer& b = buffers.at(tensor.buffer);
  if (b.storage == BufferStorage::Empty) return {};
  return std::string_view(reinterpret_cast<const char*>(data_ + b.offset), size_t(b.size));
}

TfliteFile TfliteFile::open(const std::string& path) {
  TfliteFile f;
  f.file_ = std::make_unique<MappedFile>(path);
  f.model_ = TfliteModel::parse(f.file_->data(), f.file_->size(), path);
  return f;
}

std::string quantization_summary(const TfliteQuantization& q) {
  std::ostringstream o;
  auto zero_points = [&] {
    if (q.zero_point.empty()) return std::string("no zero points");
    bool same = true;
    for (int64_t z : q.zero_point) same = same && z == q.zero_point[0];
    return same ? "zero point " + std::to_string(q.zero_point[0])
                : std::to_string(q.zero_point.size()) + " zero points";
  };
  if (q.per_channel()) {
    o << "per-channel dim " << q.quantized_dimension << ": " << q.scale.size() << " scales, " << zero_points();
  } else if (q.scale.size() == 1) {
    o << "scale " << q.scale[0] << ", " << zero_points();
  } else {
    o << "no scales";
  }
  if (q.details_type != 0) o << ", details type " << int(q.details_type);
  return o.str();
}

namespace {

const char* storage_name(BufferStorage s) {
  switch (s) {
    case BufferStorage::Empty: return "none";
    case BufferStorage::Inline: return "inline";
    case BufferStorage::Offset: return "offset";
  }
  return "?";
}

nlohmann::json quantization_json(const TfliteQuantization& q) {
  nlohmann::json j = {{"scale", q.scale}, {"zero_point", q.zero_point},
                      {"quantized_dimension", q.quantized_dimension},
                      {"summary", quantization_summary(q)}};
  if (!q.min.empty()) j["min"] = q.min;
  if (!q.max.empty()) j["max"] = q.max;
  if (q.details_type != 0) j["details_type"] = q.details_type;
  return j;
}

std::string shape_text(const std::vector<int32_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

nlohmann::json tflite_to_json(const TfliteModel& model) {
  nlohmann::json j;
  j["version"] = model.version;
  j["description"] = model.description;
  j["size"] = model.size();
  size_t inline_count = 0, offset_count = 0;
  for (const auto& b : model.buffers) {
    inline_count += b.storage == BufferStorage::Inline;
    offset_count += b.storage == BufferStorage::Offset;
  }
  j["buffers"] = {{"count", model.buffers.size()}, {"inline", inline_count}, {"offset", offset_count}};
  j["subgraphs"] = nlohmann::json::array();
  for (size_t s = 0; s < model.subgraphs.size(); ++s) {
    const auto& sg = model.subgraphs[s];
    nlohmann::json g = {{"index", s}, {"name", sg.name}, {"inputs", sg.inputs},
                        {"outputs", sg.outputs}, {"operators", sg.num_operators}};
    g["tensors"] = nlohmann::json::array();
    for (size_t i = 0; i < sg.tensors.size(); ++i) {
      const auto& t = sg.tensors[i];
      const TfliteBuffer& b = model.buffers[t.buffer];
      nlohmann::json tj = {{"index", i}, {"name", t.name}, {"shape", t.shape},
                           {"type", tflite_type_name(t.type)}, {"buffer", t.buffer},
                           {"storage", storage_name(b.storage)}, {"bytes", b.size}};
      if (b.storage == BufferStorage::Offset) tj["offset"] = b.offset;
      if (!t.shape_signature.empty()) tj["shape_signature"] = t.shape_signature;
      if (t.is_variable) tj["is_variable"] = true;
      if (t.external_buffer != 0) tj["external_buffer"] = t.external_buffer;
      tj["quantization"] = t.quantization ? quantization_json(*t.quantization) : nlohmann::json(nullptr);
      g["tensors"].push_back(std::move(tj));
    }
    j["subgraphs"].push_back(std::move(g));
  }
  j["signatures"] = nlohmann::json::array();
  for (const auto& sig : model.signatures) {
    auto refs = [&](const std::vector<TfliteTensorRef>& v) {
      nlohmann::json a = nlohmann::json::array();
      const auto& tensors = model.subgraphs[sig.subgraph_index].tensors;
      for (const auto& r : v) {
        const auto& t = tensors[r.tensor_index];
        a.push_back({{"name", r.name}, {"tensor_index", r.tensor_index}, {"tensor", t.name},
                     {"shape", t.shape}, {"type", tflite_type_name(t.type)}});
      }
      return a;
    };
    j["signatures"].push_back({{"key", sig.key}, {"subgraph_index", sig.subgraph_index},
                               {"inputs", refs(sig.inputs)}, {"outputs", refs(sig.outputs)}});
  }
  if (!model.external_buffer_groups.empty() || !model.external_buffers.empty()) {
    j["external_buffer_groups"] = model.external_buffer_groups;
    j["external_buffers"] = nlohmann::json::array();
    for (const auto& x : model.external_buffers)
      j["external_buffers"].push_back({{"id", x.id}, {"group", x.group}, {"offset", x.offset},
                                       {"length", x.length}, {"packing", x.packing}});
  }
  return j;
}

std::string tflite_to_text(const TfliteModel& model, const std::string& indent) {
  std::ostringstream o;
  size_t inline_count = 0, offset_count = 0;
  for (const auto& b : model.buffers) {
    inline_count += b.storage == BufferStorage::Inline;
    offset_count += b.storage == BufferStorage::Offset;
  }
  o << indent << "TFLite model v" << model.version << " (" << model.size() << " bytes), "
    << model.subgraphs.size() << " subgraphs, " << model.buffers.size() << " buffers (" << inline_count
    << " inline, " << offset_count << " at offsets)\n";
  for (const auto& sig : model.signatures) {
    const auto& tensors = model.subgraphs[sig.subgraph_index].tensors;
    o << indent << "signature " << in_quotes(sig.key) << " (subgraph " << sig.subgraph_index << ")\n";
    for (const auto* list : {&sig.inputs, &sig.outputs}) {
      for (const auto& r : *list) {
        const auto& t = tensors[r.tensor_index];
        o << indent << "  " << (list == &sig.inputs ? "in  " : "out ") << r.name << ": "
          << tflite_type_name(t.type) << " " << shape_text(t.shape) << "\n";
      }
    }
  }
  for (size_t s = 0; s < model.subgraphs.size(); ++s) {
    const auto& sg = model.subgraphs[s];
    o << indent << "subgraph " << s << " " << in_quotes(sg.name) << ": " << sg.tensors.size()
      << " tensors, " << sg.num_operators << " operators\n";
    for (size_t i = 0; i < sg.tensors.size(); ++i) {
      const auto& t = sg.tensors[i];
      const TfliteBuffer& b = model.buffers[t.buffer];
      o << indent << "  " << i << " " << printable(t.name) << " " << tflite_type_name(t.type) << " "
        << shape_text(t.shape);
      if (b.storage != BufferStorage::Empty) o << " " << b.size << " bytes " << storage_name(b.storage);
      if (t.external_buffer != 0) o << " external " << t.external_buffer;
      if (t.quantization) o << " [" << quantization_summary(*t.quantization) << "]";
      o << "\n";
    }
  }
  return o.str();
}

}  // namespace lumen::formats
