// A read-only memory map of a whole file (RAII). Large checkpoints are never copied.
#pragma once

#include <cstddef>
#include <cstdint>
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

  // A view of bytes the caller owns and keeps alive (a fuzzer's input, a copy in memory):
  // nothing is mapped or freed, and `name` stands for the path in errors.
  static MappedFile borrow(std::string name, const std::byte* data, size_t size);

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Empty while the file at path() is the one mapped, as it was; else why not ("truncated
  // from N to M bytes", "modified", "replaced", "removed"). A mapped file that shrinks under
  // us turns reads of its lost pages into SIGBUS, so long-running users (the server) ask
  // before using the mapping. A borrowed view or a private copy never changes.
  std::string change_on_disk() const;

 private:
  MappedFile() = default;
  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  void* region_ = nullptr;  // what munmap releases (HugePageCopy: the aligned region)
  size_t region_size_ = 0;
  bool shared_with_disk_ = false;  // Map backing: the pages are the file's
  // Identity of the file when it was opened (st_dev, st_ino, st_mtim).
  uint64_t device_ = 0, inode_ = 0;
  int64_t mtime_ns_ = 0;
};

}  // namespace lumen::formats
