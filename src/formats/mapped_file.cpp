#include "formats/mapped_file.h"

#include <cerrno>
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

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno("cannot open", path, errno);
  FdCloser closer{fd};

  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_errno("cannot stat", path, errno);
  // A directory opens fine with O_RDONLY but cannot be mapped; say so plainly.
  if (!S_ISREG(st.st_mode)) throw Error("cannot map '" + path + "': not a regular file");

  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;  // mmap rejects length 0; an empty file is simply empty

  void* mapping = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (mapping == MAP_FAILED) throw_errno("cannot map", path, errno);
  data_ = static_cast<const std::byte*>(mapping);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

}  // namespace lumen::formats
