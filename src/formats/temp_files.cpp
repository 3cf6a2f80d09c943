#include "formats/temp_files.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/error.h"

namespace lumen::formats {

namespace {

constexpr int kSlots = 16;
constexpr size_t kPathMax = 4096;

// A slot is claimed (0 -> 1), filled, then published (1 -> 2); the handler reads only
// published slots.
struct Slot {
  std::atomic<int> state{0};
  char path[kPathMax];
};
Slot slots[kSlots];

extern "C" void remove_temp_files_and_reraise(int sig) {
  for (auto& s : slots)
    if (s.state.load(std::memory_order_acquire) == 2) ::unlink(s.path);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void install_temp_file_cleanup() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, remove_temp_files_and_reraise);
}

void register_temp_file(const char* path) {
  if (std::strlen(path) >= kPathMax) return;
  for (auto& s : slots) {
    int expected = 0;
    if (s.state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      std::strcpy(s.path, path);
      s.state.store(2, std::memory_order_release);
      return;
    }
  }
}

void unregister_temp_file(const char* path) {
  for (auto& s : slots) {
    int expected = 2;
    if (std::strcmp(s.path, path) == 0 && s.state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      s.path[0] = '\0';
      s.state.store(0, std::memory_order_release);
      return;
    }
  }
}

TempFile::TempFile(std::string path) : path_(std::move(path)), temp_(path_ + ".tmp-" + std::to_string(::getpid())) {
  register_temp_file(temp_.c_str());
}

TempFile::~TempFile() {
  if (!committed_) std::remove(temp_.c_str());
  unregister_temp_file(temp_.c_str());
}

void TempFile::commit() {
  std::error_code ec;
  std::filesystem::rename(temp_, path_, ec);
  if (ec) throw Error("cannot rename " + in_quotes(temp_) + " to " + in_quotes(path_) + ": " + ec.message());
  committed_ = true;
}

}  // namespace lumen::formats
