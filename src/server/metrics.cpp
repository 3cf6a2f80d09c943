#include "server/metrics.h"

#include <fstream>
#include <sstream>

#include <unistd.h>

namespace lumen::server {

namespace {

bool known_path(const std::string& path) {
  return path == "/" || path == "/health" || path == "/metrics" || path == "/v1/models" ||
         path == "/v1/chat/completions" || path == "/v1/completions";
}

void metric(std::ostringstream& out, const char* name, const char* type, const char* help) {
  out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
}

}  // namespace

void Metrics::count_request(const std::string& path, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{known_path(path) ? path : "other", status}];
}

void Metrics::generation_finished(Outcome outcome) { ++outcomes_[int(outcome)]; }

void Metrics::add_usage(int prompt_tokens, int completion_tokens) {
  prompt_tokens_ += prompt_tokens;
  completion_tokens_ += completion_tokens;
}

std::string Metrics::render(const runtime::SchedulerStats& s, int max_active, int max_queued) const {
  std::ostringstream out;
  out.precision(6);
  metric(out, "lumen_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, n] : requests_)
      out << "lumen_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} " << n << '\n';
  }
  metric(out, "lumen_prompt_tokens_total", "counter", "Prompt tokens of answered generation requests.");
  out << "lumen_prompt_tokens_total " << prompt_tokens_.load() << '\n';
  metric(out, "lumen_generation_tokens_total", "counter", "Tokens generated for answered requests.");
  out << "lumen_generation_tokens_total " << completion_tokens_.load() << '\n';
  metric(out, "lumen_queue_depth", "gauge", "Requests waiting for a sequence slot.");
  out << "lumen_queue_depth " << s.queued << '\n';
  metric(out, "lumen_queue_capacity", "gauge", "Waiting requests beyond which new ones get a 429.");
  out << "lumen_queue_capacity " << max_queued << '\n';
  metric(out, "lumen_active_sequences", "gauge", "Sequences being prefilled or decoded.");
  out << "lumen_active_sequences " << s.active << '\n';
  metric(out, "lumen_max_active_sequences", "gauge", "Sequences decoded together at most (--parallel).");
  out << "lumen_max_active_sequences " << max_active << '\n';
  metric(out, "lumen_sequences_completed_total", "counter", "Sequences that ended on a stop rule or max_tokens.");
  out << "lumen_sequences_completed_total " << s.completed << '\n';
  metric(out, "lumen_sequences_cancelled_total", "counter", "Sequences dropped because their client went away.");
  out << "lumen_sequences_cancelled_total " << s.cancelled << '\n';
  metric(out, "lumen_sequences_failed_total", "counter", "Sequences ended by a failed model step.");
  out << "lumen_sequences_failed_total " << s.failed << '\n';
  metric(out, "lumen_requests_rejected_total", "counter", "Requests refused with 429 because the queue was full.");
  out << "lumen_requests_rejected_total " << s.rejected << '\n';
  metric(out, "lumen_scheduler_steps_total", "counter", "Batched model steps run.");
  out << "lumen_scheduler_steps_total " << s.steps << '\n';
  metric(out, "lumen_scheduler_step_seconds_max", "gauge", "Longest batched model step since start.");
  out << "lumen_scheduler_step_seconds_max " << s.step_seconds_max << '\n';
  metric(out, "lumen_scheduler_step_running_seconds", "gauge",
         "How long the model step in progress has run (0 between steps); a stalled engine grows here.");
  out << "lumen_scheduler_step_running_seconds " << s.step_running_seconds << '\n';
  metric(out, "lumen_scheduler_seconds_since_last_step", "gauge",
         "Seconds since the last model step ended (-1 before the first); grows while idle too.");
  out << "lumen_scheduler_seconds_since_last_step " << s.seconds_since_last_step << '\n';
  metric(out, "lumen_grammar_masks_total", "counter", "Grammar token masks computed (constrained decoding).");
  out << "lumen_grammar_masks_total " << s.grammar_masks << '\n';
  metric(out, "lumen_grammar_mask_seconds_total", "counter",
         "Seconds spent computing grammar masks, beside the model step.");
  out << "lumen_grammar_mask_seconds_total " << s.grammar_mask_seconds << '\n';
  metric(out, "lumen_grammar_mask_wait_seconds_total", "counter",
         "Seconds the steps waited for grammar masks after the model was done (the cost not hidden).");
  out << "lumen_grammar_mask_wait_seconds_total " << s.grammar_mask_wait_seconds << '\n';
  metric(out, "lumen_prefill_tokens_total", "counter", "Prompt tokens run through the model.");
  out << "lumen_prefill_tokens_total " << s.prefill_tokens << '\n';
  metric(out, "lumen_decode_tokens_total", "counter", "Generated tokens run through the model.");
  out << "lumen_decode_tokens_total " << s.decode_tokens << '\n';
  metric(out, "lumen_prefill_seconds_total", "counter", "Step time attributed to prompt tokens (by row share).");
  out << "lumen_prefill_seconds_total " << s.prefill_seconds << '\n';
  metric(out, "lumen_decode_seconds_total", "counter", "Step time attributed to generated tokens (by row share).");
  out << "lumen_decode_seconds_total " << s.decode_seconds << '\n';
  metric(out, "lumen_prefill_tokens_per_second", "gauge", "Prompt tokens per second of prefill time, since start.");
  out << "lumen_prefill_tokens_per_second " << (s.prefill_seconds > 0 ? double(s.prefill_tokens) / s.prefill_seconds : 0.0) << '\n';
  metric(out, "lumen_decode_tokens_per_second", "gauge", "Generated tokens per second of decode time, since start.");
  out << "lumen_decode_tokens_per_second " << (s.decode_seconds > 0 ? double(s.decode_tokens) / s.decode_seconds : 0.0) << '\n';
  metric(out, "lumen_generation_requests_total", "counter", "Generation requests received.");
  out << "lumen_generation_requests_total " << generations_received_.load() << '\n';
  metric(out, "lumen_generation_requests_finished_total", "counter",
         "Generation requests ended, by outcome (received = the sum of these + in flight).");
  static const char* const kOutcomes[] = {"completed", "cancelled", "refused", "failed"};
  int64_t finished = 0;
  for (int i = 0; i < 4; ++i) {
    const int64_t n = outcomes_[i].load();
    finished += n;
    out << "lumen_generation_requests_finished_total{outcome=\"" << kOutcomes[i] << "\"} " << n << '\n';
  }
  metric(out, "lumen_generation_requests_in_flight", "gauge", "Generation requests received and not yet ended.");
  out << "lumen_generation_requests_in_flight " << generations_received_.load() - finished << '\n';
  metric(out, "lumen_generation_time_limited_total", "counter",
         "Answers cut by the per-request time limit (finish_reason length).");
  out << "lumen_generation_time_limited_total " << time_limited_.load() << '\n';
  metric(out, "lumen_requests_rejected_memory_total", "counter",
         "Requests refused with 503 because the queue was full of requests waiting for KV memory.");
  out << "lumen_requests_rejected_memory_total " << s.rejected_memory << '\n';
  metric(out, "lumen_kv_budget_bytes", "gauge", "KV memory budget of all sequences together (0: none).");
  out << "lumen_kv_budget_bytes " << s.kv_budget_bytes << '\n';
  metric(out, "lumen_kv_reserved_bytes", "gauge", "KV memory reserved by the running sequences.");
  out << "lumen_kv_reserved_bytes " << s.kv_reserved_bytes << '\n';
  metric(out, "lumen_waiting_for_kv_memory", "gauge", "1 while the oldest queued request waits for KV memory.");
  out << "lumen_waiting_for_kv_memory " << (s.waiting_for_memory ? 1 : 0) << '\n';
  metric(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  out << "process_resident_memory_bytes " << resident_bytes() << '\n';
  return out.str();
}

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * int64_t(sysconf(_SC_PAGESIZE));
}

}  // namespace lumen::server
