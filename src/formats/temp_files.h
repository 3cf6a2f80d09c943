// Temp files of writers in progress (GgufWriter, PackedWriter write to "<path>.tmp-<pid>" and
// rename at the end), so that a signal that ends the process (Ctrl-C, SIGTERM, SIGHUP) does not
// leave them behind: the handler unlinks every registered path, then the signal ends the
// process as it would have. Async-signal-safe: fixed slots, no allocation in the handler.
#pragma once

#include <string>

namespace lumen::formats {

// Installs the handler for SIGINT, SIGTERM and SIGHUP (a command that takes those signals
// itself, as `lumen serve` does, blocks them and is unaffected).
void install_temp_file_cleanup();

// While registered, `path` is removed if a signal ends the process. Paths longer than the
// slot, or past the slot count, are simply not covered.
void register_temp_file(const char* path);
void unregister_temp_file(const char* path);

// A file written under "<path>.tmp-<pid>" and renamed onto `path` by commit(), so a reader of
// `path` never sees it half-written. While it exists the temp name is registered above; the
// destructor removes it unless committed (an exception or an early return leaves nothing).
class TempFile {
 public:
  explicit TempFile(std::string path);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  const std::string& temp_path() const { return temp_; }
  // Renames the temp file onto the path; throws lumen::Error naming both on failure.
  void commit();

 private:
  std::string path_, temp_;
  bool committed_ = false;
};

}  // namespace lumen::formats
