#include "formats/gguf_writer.h"
#include "formats/temp_files.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/error.h"

namespace lumen::formats {

namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;

class Encoder {
 public:
  std::vector<uint8_t> bytes;
  template <class T>
  void raw(T v) {
    const size_t at = bytes.size();
    bytes.resize(at + sizeof(T));
    std::memcpy(bytes.data() + at, &v, sizeof(T));
  }
  void type(GgufType t) { raw(uint32_t(t)); }
  void string(std::string_view s) {
    raw(uint64_t(s.size()));
    bytes.insert(bytes.end(), s.begin(), s.end());
  }
};

size_t element_bytes(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
    case GgufType::UINT16: case GgufType::INT16: return 2;
    case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
    case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
    default: return 0;
  }
}

// The value (without its type tag) of a GgufValue.
void encode_value(Encoder& e, const GgufValue& v) {
  switch (v.type()) {
    case GgufType::UINT8: e.raw(uint8_t(*v.to_uint())); return;
    case GgufType::INT8: e.raw(int8_t(*v.to_int())); return;
    case GgufType::UINT16: e.raw(uint16_t(*v.to_uint())); return;
    case GgufType::INT16: e.raw(int16_t(*v.to_int())); return;
    case GgufType::UINT32: e.raw(uint32_t(*v.to_uint())); return;
    case GgufType::INT32: e.raw(int32_t(*v.to_int())); return;
    case GgufType::UINT64: e.raw(uint64_t(*v.to_uint())); return;
    case GgufType::INT64: e.raw(int64_t(*v.to_int())); return;
    case GgufType::FLOAT32: e.raw(float(*v.to_float())); return;
    case GgufType::FLOAT64: e.raw(double(*v.to_float())); return;
    case GgufType::BOOL: e.raw(uint8_t(*v.to_bool() ? 1 : 0)); return;
    case GgufType::STRING: e.string(*v.to_string()); return;
    case GgufType::ARRAY: {
      const GgufArray& a = *v.array();
      e.type(a.element_type());
      e.raw(uint64_t(a.size()));
      if (a.element_type() == GgufType::STRING) {
        for (std::string_view s : a.strings()) e.string(s);
      } else if (a.element_type() == GgufType::ARRAY) {
        for (const GgufValue& inner : a.arrays()) {
          e.type(GgufType::ARRAY);
          encode_value(e, inner);
        }
      } else {
        const auto* p = reinterpret_cast<const uint8_t*>(a.raw_data());
        e.bytes.insert(e.bytes.end(), p, p + a.size() * element_bytes(a.element_type()));
      }
      return;
    }
  }
  throw Error("gguf writer: cannot encode a value of type " + std::to_string(uint32_t(v.type())));
}

template <class T>
std::vector<uint8_t> scalar(GgufType t, T v) {
  Encoder e;
  e.type(t);
  e.raw(v);
  return e.bytes;
}

template <class T>
std::vector<uint8_t> numeric_array(GgufType t, const std::vector<T>& values) {
  Encoder e;
  e.type(GgufType::ARRAY);
  e.type(t);
  e.raw(uint64_t(values.size()));
  for (const T& v : values) e.raw(v);
  return e.bytes;
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

void GgufMetadata::put(std::string_view key, std::vector<uint8_t> encoded) {
  for (Entry& e : entries_)
    if (e.key == key) {
      e.value = std::move(encoded);
      return;
    }
  entries_.push_back({std::string(key), std::move(encoded)});
}

void GgufMetadata::set_string(std::string_view key, std::string_view value) {
  Encoder e;
  e.type(GgufType::STRING);
  e.string(value);
  put(key, std::move(e.bytes));
}
void GgufMetadata::set_u32(std::string_view key, uint32_t v) { put(key, scalar(GgufType::UINT32, v)); }
void GgufMetadata::set_i32(std::string_view key, int32_t v) { put(key, scalar(GgufType::INT32, v)); }
void GgufMetadata::set_u64(std::string_view key, uint64_t v) { put(key, scalar(GgufType::UINT64, v)); }
void GgufMetadata::set_f32(std::string_view key, float v) { put(key, scalar(GgufType::FLOAT32, v)); }
void GgufMetadata::set_bool(std::string_view key, bool v) { put(key, scalar(GgufType::BOOL, uint8_t(v ? 1 : 0))); }

void GgufMetadata::set_string_array(std::string_view key, const std::vector<std::string>& values) {
  std::vector<std::string_view> views(values.begin(), values.end());
  set_string_array(key, views);
}
void GgufMetadata::set_string_array(std::string_view key, const std::vector<std::string_view>& values) {
  Encoder e;
  e.type(GgufType::ARRAY);
  e.type(GgufType::STRING);
  e.raw(uint64_t(values.size()));
  for (std::string_view s : values) e.string(s);
  put(key, std::move(e.bytes));
}
void GgufMetadata::set_i32_array(std::string_view key, const std::vector<int32_t>& v) {
  put(key, numeric_array(GgufType::INT32, v));
}
void GgufMetadata::set_u32_array(std::string_view key, const std::vector<uint32_t>& v) {
  put(key, numeric_array(GgufType::UINT32, v));
}
void GgufMetadata::set_f32_array(std::string_view key, const std::vector<float>& v) {
  put(key, numeric_array(GgufType::FLOAT32, v));
}
void GgufMetadata::set_bool_array(std::string_view key, const std::vector<bool>& v) {
  std::vector<uint8_t> bytes(v.begin(), v.end());
  put(key, numeric_array(GgufType::BOOL, bytes));
}

void GgufMetadata::set_value(std::string_view key, const GgufValue& value) {
  Encoder e;
  e.type(value.type());
  encode_value(e, value);
  put(key, std::move(e.bytes));
}

void GgufMetadata::remove(std::string_view key) {
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; }),
                 entries_.end());
}

bool GgufMetadata::has(std::string_view key) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
}

size_t gguf_tensor_bytes(const std::string& name, GgmlType type, const std::vector<int64_t>& ne) {
  const auto traits = ggml_type_traits(uint32_t(type));
  if (!traits) throw Error("gguf writer: tensor '" + name + "' has unknown type " + ggml_type_name(type));
  if (ne.empty() || ne.size() > 4) throw Error("gguf writer: tensor '" + name + "' must have 1 to 4 dims");
  for (int64_t d : ne)
    if (d <= 0) throw Error("gguf writer: tensor '" + name + "' has a dimension <= 0");
  if (ne[0] % traits->block_size != 0)
    throw Error("gguf writer: tensor '" + name + "' has rows of " + std::to_string(ne[0]) + " elements, not a multiple of " +
                std::to_string(traits->block_size) + " (" + traits->name + " blocks)");
  size_t bytes = size_t(ne[0] / traits->block_size) * traits->type_size;
  for (size_t i = 1; i < ne.size(); ++i) bytes *= size_t(ne[i]);
  return bytes;
}

GgufWriter::GgufWriter(const std::string& path, const GgufMetadata& metadata, std::vector<GgufTensorInfo> tensors)
    : path_(path), temp_path_(path + ".tmp-" + std::to_string(::getpid())), tensors_(std::move(tensors)) {
  uint64_t alignment = kDefaultAlignment;
  Encoder head;
  head.bytes = {'G', 'G', 'U', 'F'};
  head.raw(kVersion);
  head.raw(uint64_t(tensors_.size()));
  head.raw(uint64_t(metadata.size()));
  for (const auto& e : metadata.entries()) {
    if (e.key == "general.alignment") {
      uint32_t tag, v;
      std::memcpy(&tag, e.value.data(), 4);
      if (tag != uint32_t(GgufType::UINT32) || e.value.size() != 8)
        throw Error("gguf writer: general.alignment must be a UINT32");
      std::memcpy(&v, e.value.data() + 4, 4);
      if (v == 0 || (v & (v - 1)) != 0) throw Error("gguf writer: general.alignment must be a power of two");
      alignment = v;
    }
    head.string(e.key);
    head.bytes.insert(head.bytes.end(), e.value.begin(), e.value.end());
  }
  uint64_t rel = 0;
  std::vector<uint64_t> rel_offsets;
  for (const auto& t : tensors_) {
    const size_t n = gguf_tensor_bytes(t.name, t.type, t.ne);
    rel = align_up(rel, alignment);
    rel_offsets.push_back(rel);
    sizes_.push_back(n);
    head.string(t.name);
    head.raw(uint32_t(t.ne.size()));
    for (int64_t d : t.ne) head.raw(uint64_t(d));
    head.raw(uint32_t(t.type));
    head.raw(rel);
    rel += n;
  }
  const uint64_t data_start = align_up(head.bytes.size(), alignment);
  for (uint64_t r : rel_offsets) offsets_.push_back(data_start + r);
  total_ = data_start + align_up(rel, alignment);

  register_temp_file(temp_path_.c_str());
  file_ = std::fopen(temp_path_.c_str(), "wb");
  try {
    if (!file_) fail_write();
    std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
    put(head.bytes.data(), head.bytes.size());
    pad_to(data_start);
  } catch (...) {
    // The destructor does not run for a constructor that throws.
    if (file_) std::fclose(file_);
    std::remove(temp_path_.c_str());
    unregister_temp_file(temp_path_.c_str());
    throw;
  }
}

GgufWriter::~GgufWriter() {
  if (file_) std::fclose(file_);
  if (!finished_) std::remove(temp_path_.c_str());
  unregister_temp_file(temp_path_.c_str());
}

void GgufWriter::fail_write() {
  throw Error("cannot write " + in_quotes(temp_path_) + ": " + std::strerror(errno));
}

void GgufWriter::put(const void* data, size_t n) {
  if (n && std::fwrite(data, 1, n, file_) != n) fail_write();
  pos_ += n;
}

void GgufWriter::pad_to(uint64_t pos) {
  static const char zeros[256] = {};
  while (pos_ < pos) put(zeros, size_t(std::min<uint64_t>(pos - pos_, sizeof(zeros))));
}

void GgufWriter::write(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    while (current_ < tensors_.size() && in_current_ == sizes_[current_]) {
      ++current_;
      in_current_ = 0;
    }
    if (current_ >= tensors_.size()) throw Error("gguf writer: more bytes than the tensors hold");
    if (in_current_ == 0) pad_to(offsets_[current_]);
    const size_t take = size_t(std::min<uint64_t>(n, sizes_[current_] - in_current_));
    put(p, take);
    p += take;
    n -= take;
    in_current_ += take;
  }
}

void GgufWriter::finish() {
  while (current_ < tensors_.size() && in_current_ == sizes_[current_]) {
    ++current_;
    in_current_ = 0;
  }
  if (current_ != tensors_.size())
    throw Error("gguf writer: tensor '" + tensors_[current_].name + "' is incomplete");
  pad_to(total_);
  if (std::fflush(file_) != 0 || ::fsync(fileno(file_)) != 0) fail_write();
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) fail_write();
  std::error_code ec;
  std::filesystem::rename(temp_path_, path_, ec);
  if (ec) throw Error("cannot rename " + in_quotes(temp_path_) + " to " + in_quotes(path_) + ": " + ec.message());
  finished_ = true;
}

}  // namespace lumen::formats
