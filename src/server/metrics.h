// Server counters, rendered in the Prometheus text exposition format for GET /metrics.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "runtime/scheduler.h"

namespace lumen::server {

class Metrics {
 public:
  // One answered HTTP request. Unknown paths are counted under "other" so a scanner cannot
  // grow the label set without bound.
  void count_request(const std::string& path, int status);
  void add_usage(int prompt_tokens, int completion_tokens);

  std::string render(const runtime::SchedulerStats& scheduler, int max_active, int max_queued) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  std::atomic<int64_t> prompt_tokens_{0}, completion_tokens_{0};
};

// Resident set size of this process in bytes (0 when /proc is unavailable).
int64_t resident_bytes();

}  // namespace lumen::server
