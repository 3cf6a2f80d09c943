// The session settings of per-layer inputs (model/per_layer_inputs.h): what the manifest's
// `session.perLayerInputs` and the flags set. Apart from the code that runs them, so the
// readers of settings (runtime/run_config) need no kernels.
#pragma once

#include <cstdint>
#include <string>

namespace lumen::model {

// Element type of decoded rows kept in the row cache.
enum class RowDtype : uint8_t { F32, F16, BF16 };
const char* row_dtype_name(RowDtype d);

struct PerLayerInputConfig {
  // false: the table is read in place from the mapped file; true: copied into process memory
  // at configure() (the manifest's materialization cpu_resident).
  bool resident = false;
  bool row_cache = true;
  int64_t row_cache_rows = 512;
  int64_t row_cache_bytes = int64_t(64) << 20;
  RowDtype decoded = RowDtype::F32;
  bool prefetch = true;
  int rows_ahead = 1;  // tokens beyond the current step whose rows a hint may fetch
  bool hot_cache = true;
  int64_t hot_tokens = 1024;
  int64_t hot_bytes = int64_t(64) << 20;
};

std::string per_layer_input_config_to_text(const PerLayerInputConfig& c);

}  // namespace lumen::model
