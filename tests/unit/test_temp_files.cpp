// formats::TempFile: written under "<path>.tmp-<pid>", renamed by commit(), removed when not
// committed, and removed by the signal cleanup when a signal ends the process.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"
#include "formats/temp_files.h"

namespace fs = std::filesystem;

namespace {

fs::path temp_file_test_dir(const char* name) {
  const fs::path dir = fs::temp_directory_path() / ("lumen-tempfile-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

}  // namespace

TEST(TempFile, CommitRenamesOntoThePath) {
  const fs::path dir = temp_file_test_dir("commit");
  const std::string path = (dir / "out.bin").string();
  {
    lumen::formats::TempFile file(path);
    EXPECT_EQ(file.temp_path(), path + ".tmp-" + std::to_string(::getpid()));
    std::ofstream(file.temp_path()) << "done";
    EXPECT_FALSE(fs::exists(path));  // a reader never sees it half-written
    file.commit();
    EXPECT_FALSE(fs::exists(file.temp_path()));
  }
  std::ifstream in(path);
  std::string text;
  in >> text;
  EXPECT_EQ(text, "done");
  fs::remove_all(dir);
}

TEST(TempFile, WithoutCommitNothingIsLeft) {
  const fs::path dir = temp_file_test_dir("abandon");
  const std::string path = (dir / "out.bin").string();
  std::string temp;
  try {
    lumen::formats::TempFile file(path);
    temp = file.temp_path();
    std::ofstream(file.temp_path()) << "half";
    throw lumen::Error("a writer failed half-way");
  } catch (const lumen::Error&) {
  }
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST(TempFile, CommitIntoAMissingDirectoryNamesBothPaths) {
  const fs::path dir = temp_file_test_dir("missing");
  lumen::formats::TempFile file((dir / "no-such-dir" / "out.bin").string());
  try {
    file.commit();
    FAIL() << "commit into a missing directory succeeded";
  } catch (const lumen::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-dir"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(TempFile, ASignalThatEndsTheProcessRemovesIt) {
  const fs::path dir = temp_file_test_dir("signal");
  const std::string path = (dir / "out.bin").string();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    lumen::formats::install_temp_file_cleanup();
    lumen::formats::TempFile file(path);
    std::ofstream(file.temp_path()) << "interrupted";
    std::raise(SIGTERM);
    ::_exit(0);  // not reached: the handler re-raises with the default action
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "status " << status;
  EXPECT_FALSE(fs::exists(path + ".tmp-" + std::to_string(child)));
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}
