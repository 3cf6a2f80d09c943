// Which model a command runs.
#include "cli/command.h"

namespace lumen::cli {

std::string resolve_model_path(std::string model) { return model; }

}  // namespace lumen::cli
