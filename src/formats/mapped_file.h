// A read-only memory map of a whole file (RAII). Large checkpoints are never copied.
#pragma once

#include <cstddef>
#include <string>

namespace lumen::formats {

class MappedFile {
 public:
  // Map: the file's pages (4 KiB) mapped read-only. HugePageCopy: the file read into
  // anonymous memory advised to use 2 MiB transparent huge pages, then made read-only: a
  // decode step streams every weight byte, and with 4 KiB pages it misses the TLB every
  // 4 KiB (the decode kernel streams 40-70% faster from 2 MiB pages; docs/kernels.md).
  enum class Backing { Map, HugePageCopy };
  // Throws lumen::Error naming the path if it cannot be opened, mapped or read.
  explicit MappedFile(const std::string& path, Backing backing = Backing::Map);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  void* region_ = nullptr;  // what munmap releases (HugePageCopy: the aligned region)
  size_t region_size_ = 0;
};

}  // namespace lumen::formats
