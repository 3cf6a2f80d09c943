#include "model/per_layer_input_config.h"

#include <sstream>

namespace lumen::model {

const char* row_dtype_name(RowDtype d) {
  switch (d) {
    case RowDtype::F32: return "f32";
    case RowDtype::F16: return "f16";
    case RowDtype::BF16: return "bf16";
  }
  return "?";
}

std::string per_layer_input_config_to_text(const PerLayerInputConfig& c) {
  std::ostringstream o;
  o << "table " << (c.resident ? "resident" : "mapped") << "; row cache ";
  if (c.row_cache)
    o << "lru " << c.row_cache_rows << " rows / " << (c.row_cache_bytes >> 20) << " MiB " << row_dtype_name(c.decoded);
  else
    o << "off";
  o << "; prefetch ";
  if (c.prefetch) o << c.rows_ahead << " ahead";
  else o << "off";
  o << "; hot cache ";
  if (c.hot_cache) o << c.hot_tokens << " tokens / " << (c.hot_bytes >> 20) << " MiB";
  else o << "off";
  return o.str();
}

}  // namespace lumen::model
