// Parity receipts (`lumen verify`, schema "lumen.litert-receipt/v1") and the `unsupported`
// gate for packages: a receipt with a passing verdict whose package SHA-256 equals the
// package being run lifts the manifest's refusal; any other receipt does not, and the refusal
// says why in the same line.
#pragma once

#include <optional>
#include <string>

#include "spec/model_spec.h"

namespace lumen::spec {

constexpr const char* kReceiptSchema = "lumen.litert-receipt/v1";

// Where a package's receipt is looked for when none is given: PACKAGE.receipt.json.
std::string default_receipt_path(const std::string& package_path);

// Why `receipt_path` does not vouch for the package (nullopt: it does). Never throws for a
// bad receipt: a missing, unreadable or malformed receipt is a reason.
std::optional<std::string> receipt_problem(const std::string& receipt_path, const std::string& package_path);

// require_supported for a package: with an `unsupported` block, the run goes ahead when
// allow_unverified, or when the receipt (`receipt_path`, else the default path if that file
// exists) passes for exactly this package; otherwise one lumen::Error line: the block's code,
// message and recommendation, and what is wrong with the receipt.
void require_supported_package(const ModelSpec& spec, bool allow_unverified, const std::string& package_path,
                               const std::string& receipt_path);

}  // namespace lumen::spec
