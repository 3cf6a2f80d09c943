#include "spec/litert_receipt.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json.h"
#include "formats/sha256.h"

namespace lumen::spec {

std::string default_receipt_path(const std::string& package_path) { return package_path + ".receipt.json"; }

std::optional<std::string> receipt_problem(const std::string& receipt_path, const std::string& package_path) {
  std::ifstream in(receipt_path, std::ios::binary);
  if (!in) return "receipt " + receipt_path + " cannot be read";
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j;
  try {
    j = parse_json(ss.str());
  } catch (const std::exception&) {
    return "receipt " + receipt_path + " is not valid JSON";
  }
  // A field of the wrong type reads as absent (a receipt is either valid or it is not).
  auto text_field = [&](const char* key) {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
  };
  if (!j.is_object() || text_field("schema") != kReceiptSchema)
    return "receipt " + receipt_path + " is not a " + kReceiptSchema + " receipt";
  std::string package_sha;
  if (j.contains("package") && j["package"].is_object() && j["package"].contains("sha256") &&
      j["package"]["sha256"].is_string())
    package_sha = j["package"]["sha256"].get<std::string>();
  if (package_sha.empty()) return "receipt " + receipt_path + " names no package SHA-256";
  const std::string actual = formats::sha256_file(package_path);
  if (package_sha != actual)
    return "receipt " + receipt_path + " is for another package (SHA-256 " + package_sha.substr(0, 16) + "..., this one is " +
           actual.substr(0, 16) + "...)";
  const std::string verdict = text_field("verdict");
  if (verdict != "pass")
    return "receipt " + receipt_path + " has verdict " + in_quotes(printable(verdict.empty() ? "(none)" : verdict)) +
           ", not \"pass\"";
  return std::nullopt;
}

void require_supported_package(const ModelSpec& spec, bool allow_unverified, const std::string& package_path,
                               const std::string& receipt_path) {
  if (!spec.unsupported || allow_unverified) return;
  std::string receipt = receipt_path;
  std::error_code ec;
  if (receipt.empty() && std::filesystem::exists(default_receipt_path(package_path), ec))
    receipt = default_receipt_path(package_path);
  std::string why = "no parity receipt (pass --receipt R from `lumen verify`, or put " +
                    default_receipt_path(package_path) + ")";
  if (!receipt.empty()) {
    auto problem = receipt_problem(receipt, package_path);
    if (!problem) return;  // a passing receipt for exactly this package
    why = *problem;
  }
  try {
    require_supported(spec, false);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + "; " + why);
  }
}

}  // namespace lumen::spec
