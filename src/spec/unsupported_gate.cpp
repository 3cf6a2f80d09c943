#include "base/error.h"
#include "spec/model_spec.h"

namespace lumen::spec {

void require_supported(const ModelSpec& spec, bool allow_unverified) {
  if (!spec.unsupported || allow_unverified) return;
  const Unsupported& u = *spec.unsupported;
  std::string line = spec.source + ": refused: the manifest marks this artifact unsupported (" +
                     printable(u.code) + ")";
  if (!u.message.empty()) line += ": " + printable(u.message);
  if (!u.recommendation.empty()) line += "; recommendation: " + printable(u.recommendation);
  line += "; pass --allow-unverified to run it anyway";
  throw Error(line);
}

}  // namespace lumen::spec
