#include "formats/mapped_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

namespace lumen::formats {

namespace {

[[noreturn]] void throw_errno(const std::string& what, const std::string& path, int err) {
  throw Error(what + " '" + path + "': " + std::strerror(err));
}

// Closes the descriptor on every exit path; the mapping outlives it.
struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

}  // namespace

MappedFile::MappedFile(const std::string& path, Backing backing) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno("cannot open", path, errno);
  FdCloser closer{fd};

  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_errno("cannot stat", path, errno);
  // A directory opens fine with O_RDONLY but cannot be mapped; say so plainly.
  if (!S_ISREG(st.st_mode)) throw Error("cannot map '" + path + "': not a regular file");

  size_ = static_cast<size_t>(st.st_size);
  device_ = uint64_t(st.st_dev);
  inode_ = uint64_t(st.st_ino);
  mtime_ns_ = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (size_ == 0) return;  // mmap rejects length 0; an empty file is simply empty

  if (backing == Backing::HugePageCopy) {
    // A region aligned to 2 MiB (over-allocate, trim both ends) so every page can be huge.
    constexpr size_t kHuge = size_t(2) << 20;
    const size_t rounded = (size_ + kHuge - 1) & ~(kHuge - 1);
    void* raw = ::mmap(nullptr, rounded + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw_errno("cannot allocate memory for", path, errno);
    auto* start = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + kHuge - 1) & ~uintptr_t(kHuge - 1));
    const size_t head = size_t(start - static_cast<char*>(raw));
    if (head > 0) ::munmap(raw, head);
    if (kHuge - head > 0) ::munmap(start + rounded, kHuge - head);
    region_ = start;
    region_size_ = rounded;
    ::madvise(start, rounded, MADV_HUGEPAGE);  // advice only: without THP it is a plain copy
    for (size_t off = 0; off < size_;) {
      const ssize_t got = ::pread(fd, start + off, std::min<size_t>(size_ - off, size_t(1) << 30), off_t(off));
      if (got <= 0) {
        const int err = got < 0 ? errno : EIO;
        ::munmap(region_, region_size_);
        region_ = nullptr;
        throw_errno(got < 0 ? "cannot read" : "file shrank while reading", path, err);
      }
      off += size_t(got);
    }
    ::mprotect(start, rounded, PROT_READ);
    data_ = reinterpret_cast<const std::byte*>(start);
    return;
  }
  void* mapping = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (mapping == MAP_FAILED) throw_errno("cannot map", path, errno);
  data_ = static_cast<const std::byte*>(mapping);
  region_ = mapping;
  region_size_ = size_;
  shared_with_disk_ = true;
}

MappedFile MappedFile::borrow(std::string name, const std::byte* data, size_t size) {
  MappedFile view;
  view.path_ = std::move(name);
  view.data_ = data;
  view.size_ = size;
  return view;
}

std::string MappedFile::change_on_disk() const {
  if (!shared_with_disk_) return {};
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return "removed";
  if (uint64_t(st.st_dev) != device_ || uint64_t(st.st_ino) != inode_) return "replaced by another file";
  if (size_t(st.st_size) < size_)
    return "truncated from " + std::to_string(size_) + " to " + std::to_string(st.st_size) + " bytes";
  if (size_t(st.st_size) != size_)
    return "grown from " + std::to_string(size_) + " to " + std::to_string(st.st_size) + " bytes";
  if (int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec != mtime_ns_) return "modified";
  return {};
}

MappedFile::~MappedFile() {
  if (region_ != nullptr) ::munmap(region_, region_size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      region_(std::exchange(other.region_, nullptr)),
      region_size_(std::exchange(other.region_size_, 0)),
      shared_with_disk_(std::exchange(other.shared_with_disk_, false)),
      device_(other.device_),
      inode_(other.inode_),
      mtime_ns_(other.mtime_ns_) {}

}  // namespace lumen::formats
