// A progress bar on stderr, drawn only when stderr is a terminal: `label [####    ] 42%`
// plus a caller-given detail. Updates redraw only when the whole percent changes.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include <fmt/format.h>

namespace lumen::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label) : label_(std::move(label)), tty_(::isatty(2) == 1) {}
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;
  ~ProgressBar() {
    if (tty_ && last_ >= 0) fmt::print(stderr, "\n");
  }
  void update(uint64_t done, uint64_t total, const std::string& detail = "") {
    if (!tty_ || total == 0) return;
    const int pct = int(done * 100 / total);
    if (pct == last_ && detail == last_detail_) return;
    last_ = pct;
    last_detail_ = detail;
    constexpr int kWidth = 40;
    const int fill = pct * kWidth / 100;
    fmt::print(stderr, "\r{} [{}{}] {:3d}%  {}\x1b[K", label_, std::string(size_t(fill), '#'),
               std::string(size_t(kWidth - fill), ' '), pct, detail);
    std::fflush(stderr);
  }

 private:
  std::string label_;
  bool tty_;
  int last_ = -1;
  std::string last_detail_;
};

}  // namespace lumen::cli
