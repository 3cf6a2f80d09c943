#include "formats/packed.h"
#include "formats/little_endian.h"
#include "formats/temp_files.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "base/dtype.h"
#include "base/error.h"
#include "base/json.h"

namespace lumen::formats {
namespace {

constexpr char kPackedMagic[8] = {'L', 'U', 'M', 'E', 'N', 'P', 'K', '\0'};
constexpr size_t kFixedBytes = 24;

uint64_t align_up(uint64_t v) { return (v + kPackedAlign - 1) / kPackedAlign * kPackedAlign; }


}  // namespace

bool is_packed_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  return in.gcount() == 8 && std::memcmp(magic, kPackedMagic, 8) == 0;
}

std::unique_ptr<PackedFile> PackedFile::open(const std::string& path) {
  // LUMEN_WEIGHTS_HUGEPAGES=1: weights copied into 2 MiB pages (faster decode, slower load).
  const char* huge = std::getenv("LUMEN_WEIGHTS_HUGEPAGES");
  const bool copy = huge && *huge && *huge != '0';
  return read(std::make_unique<MappedFile>(path, copy ? MappedFile::Backing::HugePageCopy : MappedFile::Backing::Map));
}

std::unique_ptr<PackedFile> PackedFile::parse(const std::byte* data, size_t size, const std::string& name) {
  return read(std::make_unique<MappedFile>(MappedFile::borrow(name, data, size)));
}

std::unique_ptr<PackedFile> PackedFile::read(std::unique_ptr<MappedFile> file) {
  auto pf = std::unique_ptr<PackedFile>(new PackedFile());
  pf->file_ = std::move(file);
  const std::string& path = pf->file_->path();
  const std::byte* base = pf->file_->data();
  const uint64_t size = pf->file_->size();
  const std::string where = path + ": ";
  if (size < 8 || std::memcmp(base, kPackedMagic, 8) != 0) throw Error(where + "not a Lumen packed model (bad magic)");
  if (size < kFixedBytes) throw Error(where + "truncated packed model (" + std::to_string(size) + " bytes)");
  const uint32_t version = read_le<uint32_t>(base + 8);
  if (version > kPackedVersion)
    throw Error(where + "packed format version " + std::to_string(version) + " is newer than this lumen reads (" +
                std::to_string(kPackedVersion) + "); convert the model again with this version");
  if (version == 0) throw Error(where + "packed format version 0 is not valid");
  const uint64_t header_len = read_le<uint64_t>(base + 16);
  if (header_len > size - kFixedBytes)
    throw Error(where + "truncated packed model: the header needs " + std::to_string(header_len) + " bytes, the file has " +
                std::to_string(size - kFixedBytes) + " after the fixed part");
  try {
    pf->header_ = parse_json(std::string_view(reinterpret_cast<const char*>(base + kFixedBytes), header_len));
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + "packed header is not valid JSON");
  }
  const auto& h = pf->header_;
  try {
    const std::string arch = h.at("architecture").get<std::string>();
    if (arch != kPackedArchitecture)
      throw Error(where + "architecture " + in_quotes(arch) + " is not supported (this lumen runs " +
                  kPackedArchitecture + ")");
    if (!h.at("config").is_object()) throw Error(where + "packed header field 'config' is not an object");
    const uint64_t data_start = align_up(kFixedBytes + header_len);
    for (const auto& t : h.at("tensors")) {
      TensorView v;
      v.name = t.at("name").get<std::string>();
      v.storage_format = t.at("format").get<std::string>();
      if (auto dt = dtype_from_name(v.storage_format)) {
        v.dtype = *dt;
        v.storage_format.clear();
      } else {
        v.dtype = DType::U8;
      }
      v.shape = t.at("shape").get<std::vector<int64_t>>();
      const uint64_t offset = t.at("offset").get<uint64_t>(), n = t.at("size").get<uint64_t>();
      if (offset % kPackedAlign) throw Error(where + "tensor " + in_quotes(v.name) + " is not 64-byte aligned");
      if (data_start > size || offset > size - data_start || n > size - data_start - offset)
        throw Error(where + "truncated packed model: tensor " + in_quotes(v.name) + " ends at byte " +
                    std::to_string(data_start) + " + " + std::to_string(offset) + " + " + std::to_string(n) +
                    " but the file has " + std::to_string(size));
      v.data = base + data_start + offset;
      v.nbytes = n;
      v.file = path;
      if (!pf->tensors_.emplace(v.name, v).second) throw Error(where + "duplicate tensor " + in_quotes(v.name));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + "bad packed header: " + e.what());
  }
  return pf;
}

const TensorView* PackedFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> PackedFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

PackedWriter::PackedWriter(const std::string& path, nlohmann::json header, std::vector<PackedTensorEntry> entries)
    : path_(path), temp_path_(path + ".tmp-" + std::to_string(::getpid())), entries_(std::move(entries)) {
  uint64_t rel = 0;
  nlohmann::json table = nlohmann::json::array();
  std::vector<uint64_t> rel_offsets;
  for (const auto& e : entries_) {
    rel = align_up(rel);
    rel_offsets.push_back(rel);
    table.push_back({{"name", e.name}, {"format", e.format}, {"shape", e.shape}, {"offset", rel}, {"size", e.size}});
    rel += e.size;
  }
  header["tensors"] = std::move(table);
  const std::string text = header.dump();
  const uint64_t data_start = align_up(kFixedBytes + text.size());
  for (uint64_t r : rel_offsets) offsets_.push_back(data_start + r);
  total_ = data_start + rel;

  register_temp_file(temp_path_.c_str());
  file_ = std::fopen(temp_path_.c_str(), "wb");
  try {
    if (!file_) throw Error("cannot write " + in_quotes(temp_path_) + ": " + std::strerror(errno));
    std::setvbuf(file_, nullptr, _IOFBF, 1 << 20);
    std::byte fixed[kFixedBytes] = {};
    std::memcpy(fixed, kPackedMagic, 8);
    const uint32_t version = kPackedVersion;
    const uint64_t len = text.size();
    std::memcpy(fixed + 8, &version, 4);
    std::memcpy(fixed + 16, &len, 8);
    if (std::fwrite(fixed, 1, kFixedBytes, file_) != kFixedBytes || std::fwrite(text.data(), 1, text.size(), file_) != text.size())
      throw Error("cannot write " + in_quotes(temp_path_) + ": " + std::strerror(errno));
  } catch (...) {
    // The destructor does not run for a constructor that throws.
    if (file_) std::fclose(file_);
    std::remove(temp_path_.c_str());
    unregister_temp_file(temp_path_.c_str());
    throw;
  }
  pos_ = kFixedBytes + text.size();
  written_ = pos_;
}

PackedWriter::~PackedWriter() {
  if (file_) std::fclose(file_);
  if (!finished_) std::remove(temp_path_.c_str());
  unregister_temp_file(temp_path_.c_str());
}

void PackedWriter::pad_to(uint64_t pos) {
  static const char zeros[kPackedAlign] = {};
  while (pos_ < pos) {
    const size_t n = size_t(std::min<uint64_t>(pos - pos_, kPackedAlign));
    if (std::fwrite(zeros, 1, n, file_) != n) throw Error("cannot write " + in_quotes(temp_path_) + ": " + std::strerror(errno));
    pos_ += n;
  }
}

void PackedWriter::write(const void* data, size_t n) {
  const auto* p = static_cast<const std::byte*>(data);
  while (n > 0) {
    while (current_ < entries_.size() && in_current_ == entries_[current_].size) {
      ++current_;
      in_current_ = 0;
    }
    if (current_ >= entries_.size()) throw Error("packed writer: more bytes than the tensor table holds");
    if (in_current_ == 0) pad_to(offsets_[current_]);
    const size_t take = size_t(std::min<uint64_t>(n, entries_[current_].size - in_current_));
    if (std::fwrite(p, 1, take, file_) != take)
      throw Error("cannot write " + in_quotes(temp_path_) + ": " + std::strerror(errno));
    p += take;
    n -= take;
    in_current_ += take;
    pos_ += take;
    written_ = pos_;
  }
}

void PackedWriter::finish() {
  while (current_ < entries_.size() && in_current_ == entries_[current_].size) {
    ++current_;
    in_current_ = 0;
  }
  if (current_ != entries_.size()) throw Error("packed writer: tensor " + in_quotes(entries_[current_].name) + " is incomplete");
  if (std::fflush(file_) != 0 || ::fsync(fileno(file_)) != 0 || std::fclose(file_) != 0) {
    file_ = nullptr;
    throw Error("cannot write " + in_quotes(temp_path_) + ": " + std::strerror(errno));
  }
  file_ = nullptr;
  std::error_code ec;
  std::filesystem::rename(temp_path_, path_, ec);
  if (ec) throw Error("cannot rename " + in_quotes(temp_path_) + " to " + in_quotes(path_) + ": " + ec.message());
  finished_ = true;
}

}  // namespace lumen::formats
