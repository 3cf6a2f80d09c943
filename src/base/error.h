// Lumen's single error type: every failure the user can cause (bad file, bad field, bad
// request) is reported as one line that names the file, field or request at fault.
#pragma once

#include <stdexcept>
#include <string>

namespace lumen {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace lumen
