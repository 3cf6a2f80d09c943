#include "formats/flatbuffer.h"

#include "base/error.h"

namespace lumen::formats::fb {

void Buffer::fail(const std::string& path, const std::string& what) const {
  std::string message = where;
  message += ": ";
  if (!path.empty()) {
    message += path;
    message += ": ";
  }
  message += what;
  throw Error(message);
}

void Buffer::check_range(size_t pos, uint64_t n, const std::string& path, const char* what) const {
  if (pos > size || n > uint64_t(size - pos)) {
    fail(path, std::string(what) + " at byte " + std::to_string(pos) + " (" + std::to_string(n) +
                   " bytes) runs past the end of the " + std::to_string(size) + "-byte FlatBuffer");
  }
}

void Buffer::charge(uint64_t bytes, const std::string& path) const {
  const uint64_t limit = 2 * uint64_t(size) + 65536;
  decoded += bytes;
  if (decoded > limit)
    fail(path, "the FlatBuffer's offsets reach the same data over and over (" + std::to_string(decoded) +
                   " bytes decoded from " + std::to_string(size) + "): refused");
}

Table Table::root(const Buffer& buf, size_t pos, const std::string& path) {
  buf.check_range(pos, 4, path, "root offset");
  const uint32_t off = buf.read<uint32_t>(pos);
  if (off == 0) buf.fail(path, "root offset is 0");
  return Table(buf, pos + off, path);
}

Table::Table(const Buffer& buf, size_t pos, std::string path)
    : buf_(&buf), pos_(pos), path_(std::move(path)) {
  buf.check_range(pos, 4, path_, "table");
  const int32_t soffset = buf.read<int32_t>(pos);
  const int64_t vtable = int64_t(pos) - int64_t(soffset);
  if (vtable < 0 || uint64_t(vtable) > buf.size) {
    buf.fail(path_, "vtable offset " + std::to_string(soffset) + " of the table at byte " +
                        std::to_string(pos) + " points outside the FlatBuffer");
  }
  vtable_ = size_t(vtable);
  buf.check_range(vtable_, 4, path_, "vtable");
  vtable_size_ = buf.read<uint16_t>(vtable_);
  inline_size_ = buf.read<uint16_t>(vtable_ + 2);
  if (vtable_size_ < 4 || vtable_size_ % 2 != 0) {
    buf.fail(path_, "bad vtable size " + std::to_string(vtable_size_));
  }
  buf.check_range(vtable_, vtable_size_, path_, "vtable");
  if (inline_size_ < 4) buf.fail(path_, "bad table size " + std::to_string(inline_size_));
  buf.check_range(pos_, inline_size_, path_, "table");
  buf.charge(inline_size_, path_);
}

uint16_t Table::field_offset(int field) const {
  const size_t slot = 4 + 2 * size_t(field);
  if (slot + 2 > vtable_size_) return 0;  // written by an older schema: absent
  return buf_->read<uint16_t>(vtable_ + slot);
}

std::string Table::child(const char* name) const {
  if (path_.empty()) return name;
  std::string out = path_;
  out += '.';
  out += name;
  return out;
}

void Table::check_inline(uint16_t off, size_t n, const char* name) const {
  if (off < 4 || size_t(off) + n > inline_size_) {
    buf_->fail(child(name), "field offset " + std::to_string(off) + " lies outside its table (" +
                                std::to_string(inline_size_) + " bytes)");
  }
}

size_t Table::follow(int field, const char* name) const {
  const uint16_t off = field_offset(field);
  check_inline(off, 4, name);
  const size_t at = pos_ + off;
  const uint32_t rel = buf_->read<uint32_t>(at);
  if (rel == 0) buf_->fail(child(name), "offset is 0");
  const uint64_t target = uint64_t(at) + rel;
  if (target >= buf_->size) {
    buf_->fail(child(name), "offset " + std::to_string(rel) + " at byte " + std::to_string(at) +
                                " points past the end of the " + std::to_string(buf_->size) +
                                "-byte FlatBuffer");
  }
  return size_t(target);
}

std::optional<Table> Table::table(int field, const char* name) const {
  if (!has(field)) return std::nullopt;
  return Table(*buf_, follow(field, name), child(name));
}

std::optional<Table> Table::union_table(int field, const char* name) const {
  return table(field, name);
}

std::optional<size_t> Table::reference(int field, const char* name) const {
  if (!has(field)) return std::nullopt;
  return follow(field, name);
}

std::string_view read_string(const Buffer& buf, size_t pos, const std::string& path) {
  buf.check_range(pos, 4, path, "string length");
  const uint32_t n = buf.read<uint32_t>(pos);
  buf.check_range(pos + 4, n, path, "string");
  buf.charge(4 + uint64_t(n), path);
  return std::string_view(reinterpret_cast<const char*>(buf.data + pos + 4), n);
}

std::optional<std::string_view> Table::string(int field, const char* name) const {
  if (!has(field)) return std::nullopt;
  return read_string(*buf_, follow(field, name), child(name));
}

Vector Table::vector(int field, size_t elem_size, const char* name) const {
  if (!has(field)) return Vector(buf_, 0, 0, elem_size, child(name));
  const size_t at = follow(field, name);
  const std::string path = child(name);
  buf_->check_range(at, 4, path, "vector length");
  const uint32_t n = buf_->read<uint32_t>(at);
  buf_->check_range(at + 4, uint64_t(n) * elem_size, path,
                    ("vector of " + std::to_string(n) + " elements").c_str());
  buf_->charge(4 + uint64_t(n) * elem_size, path);
  return Vector(buf_, at + 4, n, elem_size, path);
}

Table Vector::table(uint32_t i) const {
  const size_t at = pos_ + size_t(i) * 4;
  const std::string path = path_ + "[" + std::to_string(i) + "]";
  const uint32_t rel = buf_->read<uint32_t>(at);
  const uint64_t target = uint64_t(at) + rel;
  if (rel == 0 || target >= buf_->size) {
    buf_->fail(path, "offset " + std::to_string(rel) + " at byte " + std::to_string(at) +
                         " points outside the " + std::to_string(buf_->size) + "-byte FlatBuffer");
  }
  return Table(*buf_, size_t(target), path);
}

std::string_view Vector::string(uint32_t i) const {
  const size_t at = pos_ + size_t(i) * 4;
  const std::string path = path_ + "[" + std::to_string(i) + "]";
  const uint32_t rel = buf_->read<uint32_t>(at);
  const uint64_t target = uint64_t(at) + rel;
  if (rel == 0 || target >= buf_->size) {
    buf_->fail(path, "offset " + std::to_string(rel) + " points outside the FlatBuffer");
  }
  return read_string(*buf_, size_t(target), path);
}

}  // namespace lumen::formats::fb
