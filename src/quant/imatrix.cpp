#include "quant/imatrix.h"

#include <cmath>
#include <cstring>
#include <fstream>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"

namespace lumen::quant {

namespace {

constexpr const char* kSums = ".in_sum2";
constexpr const char* kCounts = ".counts";

bool ends_with(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

bool starts_with_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open for reading");
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

void check_finite(const std::string& path, const std::string& name, const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x) || x < 0) throw Error(path + ": imatrix entry '" + printable(name) + "' holds a negative or non-finite value");
}

std::vector<float> f32_data(const formats::GgufFile& f, const formats::GgufTensor& t) {
  if (t.type != formats::GgmlType::F32)
    throw Error(f.path() + ": imatrix tensor '" + printable(t.name) + "' is " + formats::ggml_type_name(t.type) + ", not F32");
  std::vector<float> v(size_t(t.numel()));
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

Imatrix read_gguf_imatrix(const std::string& path) {
  const formats::GgufFile f = formats::GgufFile::open(path);
  Imatrix m;
  if (const auto* v = f.find_metadata("general.type"); v && v->to_string() && *v->to_string() != "imatrix")
    throw Error(path + ": general.type is '" + printable(*v->to_string()) + "', not an imatrix");
  if (f.has("imatrix.datasets"))
    for (std::string_view s : f.get_string_array("imatrix.datasets")) m.datasets.emplace_back(s);
  if (f.has("imatrix.chunk_count")) m.chunk_count = uint32_t(f.get_int("imatrix.chunk_count"));
  if (f.has("imatrix.chunk_size")) m.chunk_size = uint32_t(f.get_int("imatrix.chunk_size"));
  for (const auto& t : f.tensors()) {
    if (ends_with(t.name, kSums)) {
      const std::string name = t.name.substr(0, t.name.size() - std::strlen(kSums));
      m.entries[name].sums = f32_data(f, t);
    } else if (ends_with(t.name, kCounts)) {
      const std::string name = t.name.substr(0, t.name.size() - std::strlen(kCounts));
      m.entries[name].counts = f32_data(f, t);
    } else {
      throw Error(path + ": tensor '" + printable(t.name) + "' is neither NAME.in_sum2 nor NAME.counts");
    }
  }
  if (m.entries.empty()) throw Error(path + ": the imatrix holds no entries");
  for (const auto& [name, e] : m.entries) {
    if (e.sums.empty() || e.counts.empty())
      throw Error(path + ": imatrix entry '" + printable(name) + "' lacks its " + (e.sums.empty() ? "in_sum2" : "counts") + " tensor");
    if (e.sums.size() % e.counts.size() != 0)
      throw Error(path + ": imatrix entry '" + printable(name) + "' has " + std::to_string(e.sums.size()) +
                  " sums for " + std::to_string(e.counts.size()) + " counts");
    check_finite(path, name, e.sums);
    check_finite(path, name, e.counts);
  }
  return m;
}

Imatrix read_legacy_imatrix(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  auto read_i32 = [&](const char* what) {
    int32_t v = 0;
    in.read(reinterpret_cast<char*>(&v), 4);
    if (in.gcount() != 4) throw Error(path + ": not an imatrix (truncated " + what + ")");
    return v;
  };
  Imatrix m;
  const int32_t n = read_i32("entry count");
  if (n < 1 || n > 1000000) throw Error(path + ": not an imatrix (entry count " + std::to_string(n) + ")");
  for (int32_t k = 0; k < n; ++k) {
    const int32_t len = read_i32("name length");
    if (len < 1 || len > 4096) throw Error(path + ": not an imatrix (entry " + std::to_string(k) + " name length)");
    std::string name(size_t(len), '\0');
    in.read(name.data(), len);
    if (in.gcount() != len) throw Error(path + ": not an imatrix (truncated name of entry " + std::to_string(k) + ")");
    const int32_t ncall = read_i32("call count");
    const int32_t nval = read_i32("value count");
    if (nval < 1 || nval > (1 << 26)) throw Error(path + ": imatrix entry '" + printable(name) + "' has a bad value count");
    ImatrixEntry e;
    e.sums.resize(size_t(nval));
    in.read(reinterpret_cast<char*>(e.sums.data()), std::streamsize(nval) * 4);
    if (in.gcount() != std::streamsize(nval) * 4) throw Error(path + ": imatrix entry '" + printable(name) + "' is truncated");
    check_finite(path, name, e.sums);
    // Legacy sums are means times ncall: keep them as sums over ncall "tokens".
    e.counts = {float(std::max(ncall, 0))};
    m.entries[name] = std::move(e);
  }
  int32_t chunks = 0;
  in.read(reinterpret_cast<char*>(&chunks), 4);
  if (in.gcount() == 4) {
    m.chunk_count = uint32_t(std::max(chunks, 0));
    int32_t len = 0;
    in.read(reinterpret_cast<char*>(&len), 4);
    if (in.gcount() == 4 && len > 0 && len < 65536) {
      std::string dataset(size_t(len), '\0');
      in.read(dataset.data(), len);
      if (in.gcount() == len) m.datasets.push_back(dataset);
    }
  }
  return m;
}

}  // namespace

Imatrix read_imatrix(const std::string& path) {
  return starts_with_gguf_magic(path) ? read_gguf_imatrix(path) : read_legacy_imatrix(path);
}

void write_imatrix(const std::string& path, const Imatrix& m) {
  formats::GgufMetadata md;
  md.set_string("general.type", "imatrix");
  md.set_string_array("imatrix.datasets", m.datasets);
  md.set_u32("imatrix.chunk_count", m.chunk_count);
  md.set_u32("imatrix.chunk_size", m.chunk_size);
  std::vector<formats::GgufTensorInfo> tensors;
  for (const auto& [name, e] : m.entries) {  // std::map: sorted by name, as llama-imatrix writes
    const int64_t n_mat = int64_t(e.counts.size());
    tensors.push_back({name + kSums, formats::GgmlType::F32, {int64_t(e.sums.size()) / n_mat, n_mat}});
    tensors.push_back({name + kCounts, formats::GgmlType::F32, {1, n_mat}});
  }
  formats::GgufWriter w(path, md, tensors);
  for (const auto& [name, e] : m.entries) {
    w.write(e.sums.data(), e.sums.size() * 4);
    w.write(e.counts.data(), e.counts.size() * 4);
  }
  w.finish();
}

std::vector<float> imatrix_importance(const ImatrixEntry& e) {
  const size_t n_mat = e.counts.size(), ne0 = e.sums.size() / n_mat;
  std::vector<float> out(e.sums.size());
  for (size_t k = 0; k < n_mat; ++k)
    for (size_t i = 0; i < ne0; ++i) out[k * ne0 + i] = e.counts[k] > 0 ? e.sums[k * ne0 + i] / e.counts[k] : 1.0f;
  return out;
}

std::map<std::string, std::vector<float>> imatrix_importance_for(const Imatrix& imatrix, const std::string& path,
                                                                 const std::map<std::string, ImatrixTensorShape>& tensors,
                                                                 const std::string& model) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, e] : imatrix.entries) {
    const auto it = tensors.find(name);
    if (it == tensors.end())
      throw Error(path + ": imatrix entry '" + printable(name) + "' names no tensor of " + model +
                  " (an imatrix of another model?)");
    const ImatrixTensorShape& t = it->second;
    if (e.counts.size() != size_t(t.matrices) || e.sums.size() != size_t(t.row_length) * size_t(t.matrices))
      throw Error(path + ": imatrix entry '" + printable(name) + "' has " + std::to_string(e.sums.size()) +
                  " values but tensor '" + printable(name) + "' of " + model + " has rows of " +
                  std::to_string(t.row_length) + (t.matrices > 1 ? " in " + std::to_string(t.matrices) + " matrices" : "") +
                  " (an imatrix of another model?)");
    out[name] = imatrix_importance(e);
  }
  return out;
}

}  // namespace lumen::quant
