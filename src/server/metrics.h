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

  // Generation requests (/v1/chat/completions, /v1/completions): each one received ends in
  // exactly one outcome, so received = completed + cancelled + refused + failed + in flight.
  //   completed: answered in full (finish_reason stop or length, a time limit included)
  //   cancelled: the client went away, or the server's shutdown cut the answer
  //   refused:   a 4xx, 429 or 503 before any generation
  //   failed:    a 500 (a failed model step)
  enum class Outcome { Completed, Cancelled, Refused, Failed };
  void generation_received() { ++generations_received_; }
  void generation_finished(Outcome outcome);
  void count_time_limited() { ++time_limited_; }

  std::string render(const runtime::SchedulerStats& scheduler, int max_active, int max_queued) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  std::atomic<int64_t> prompt_tokens_{0}, completion_tokens_{0};
  std::atomic<int64_t> generations_received_{0}, time_limited_{0};
  std::atomic<int64_t> outcomes_[4] = {};
};

// Resident set size of this process in bytes (0 when /proc is unavailable).
int64_t resident_bytes();

}  // namespace lumen::server
