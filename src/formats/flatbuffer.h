// A small read-only FlatBuffer reader that checks every offset against the buffer before it
// follows it. Used for the .litertlm header and TFLite models, whose bytes we do not trust.
//
// Wire format (flatbuffers.dev "internals"): little-endian; a table starts with an i32
// soffset to its vtable (vtable = table - soffset); the vtable is u16 vtable size, u16 table
// inline size, then one u16 per field: the field's offset from the table start (0 = absent).
// References (tables, vectors, strings) are u32 offsets relative to where they are stored.
// A vector/string is a u32 count followed by the elements (strings add a NUL).
//
// Every defect throws lumen::Error with one line: "<where>: <path>: <what>", where `where`
// names the file (and section) and `path` the field, e.g. "sections[2].items[0].key".
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace lumen::formats::fb {

// The bytes a FlatBuffer lives in, and the name used in errors.
struct Buffer {
  const std::byte* data = nullptr;
  size_t size = 0;
  std::string where;

  [[noreturn]] void fail(const std::string& path, const std::string& what) const;

  template <typename T>
  T read(size_t pos) const {  // caller has checked pos + sizeof(T) <= size
    T v;
    std::memcpy(&v, data + pos, sizeof(T));
    return v;
  }
  // Throws unless [pos, pos + n) lies inside the buffer (overflow-safe).
  void check_range(size_t pos, uint64_t n, const std::string& path, const char* what) const;
  // Counts bytes decoded (tables, vectors, strings as they are reached). A writer stores each
  // once, so a file reaches about its own size; offsets that share one table or vector many
  // times over (a few KB that decode to gigabytes of tensors) are refused past twice the size.
  void charge(uint64_t bytes, const std::string& path) const;
  mutable uint64_t decoded = 0;
};

class Table;

// A vector of scalars or of references (tables/strings), located and bounds-checked.
class Vector {
 public:
  Vector() = default;
  Vector(const Buffer* buf, size_t elems_pos, uint32_t count, size_t elem_size, std::string path)
      : buf_(buf), pos_(elems_pos), count_(count), elem_size_(elem_size), path_(std::move(path)) {}

  uint32_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  const std::string& path() const { return path_; }
  // Position of the first element in the buffer.
  size_t data_pos() const { return pos_; }
  const std::byte* data() const { return buf_ ? buf_->data + pos_ : nullptr; }

  template <typename T>
  T scalar(uint32_t i) const {
    static_assert(std::is_arithmetic_v<T>);
    return buf_->read<T>(pos_ + size_t(i) * sizeof(T));
  }
  Table table(uint32_t i) const;
  std::string_view string(uint32_t i) const;

 private:
  const Buffer* buf_ = nullptr;
  size_t pos_ = 0;
  uint32_t count_ = 0;
  [[maybe_unused]] size_t elem_size_ = 0;  // kept for debugging; reads use sizeof(T)
  std::string path_;
};

class Table {
 public:
  // The root table: a u32 offset at `pos` (usually 0) to the table.
  static Table root(const Buffer& buf, size_t pos, const std::string& path);
  // A table at `pos` (its soffset); validates its vtable.
  Table(const Buffer& buf, size_t pos, std::string path);

  const std::string& path() const { return path_; }
  const Buffer& buffer() const { return *buf_; }
  size_t pos() const { return pos_; }

  bool has(int field) const { return field_offset(field) != 0; }
  // Absolute position of a present field's inline bytes (tests patch files through it).
  std::optional<size_t> field_position(int field) const {
    const uint16_t off = field_offset(field);
    return off == 0 ? std::nullopt : std::optional<size_t>(pos_ + off);
  }

  template <typename T>
  T scalar(int field, T default_value, const char* name) const {
    static_assert(std::is_arithmetic_v<T>);
    const uint16_t off = field_offset(field);
    if (off == 0) return default_value;
    check_inline(off, sizeof(T), name);
    return buf_->read<T>(pos_ + off);
  }

  std::optional<Table> table(int field, const char* name) const;
  std::optional<std::string_view> string(int field, const char* name) const;
  // Absent vectors read as empty.
  Vector vector(int field, size_t elem_size, const char* name) const;
  // The table a union value field refers to (the union's type is a separate u8 field).
  std::optional<Table> union_table(int field, const char* name) const;
  // Position of data a reference field points at (a union member that is a struct).
  std::optional<size_t> reference(int field, const char* name) const;

  std::string child(const char* name) const;

 private:
  uint16_t field_offset(int field) const;
  void check_inline(uint16_t off, size_t n, const char* name) const;
  size_t follow(int field, const char* name) const;  // target of a u32 offset field

  const Buffer* buf_;
  size_t pos_;
  size_t vtable_ = 0;
  uint16_t vtable_size_ = 0;
  uint16_t inline_size_ = 0;
  std::string path_;
};

// Reads the string at `pos` (its u32 length) with bounds checks.
std::string_view read_string(const Buffer& buf, size_t pos, const std::string& path);

}  // namespace lumen::formats::fb
