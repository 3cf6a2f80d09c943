// The field table of a doppler.execution/v1 manifest: every field (every leaf of the JSON;
// lists are one field) classified as
//   honoured — Lumen does what it says (and where: the spec, the KV cache, the tokenizer ...);
//   checked  — validated against the weights, the spec or the tokenizer (a mismatch is an error);
//   ignored  — has no effect here, with the reason (GPU-only, inert, superseded);
//   refused  — a value Lumen cannot honour faithfully: running the manifest is an error that
//              names the field.
// `lumen inspect --manifest` prints it; `lumen run --manifest` summarizes it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lumen::runtime {

enum class FieldStatus { Honoured, Checked, Ignored, Refused };
const char* field_status_name(FieldStatus s);  // "honoured" "checked" "ignored" "refused"

struct ManifestField {
  std::string path;  // dotted, from the root ("runtime.architecture.numLayers")
  nlohmann::json value;
  FieldStatus status = FieldStatus::Ignored;
  std::string note;  // where it is used, what it is checked against, or why it is ignored/refused
};

struct FieldCounts {
  int honoured = 0, checked = 0, ignored = 0, refused = 0;
  int total() const { return honoured + checked + ignored + refused; }
};

struct FieldTable {
  std::string source;
  std::vector<ManifestField> fields;
  // The first refusal as the one error line a run would print ("" when none).
  std::string error;
  FieldCounts counts() const;
};

// Walks the whole manifest and classifies every field. Also runs the spec and session
// builders, so a value they refuse is marked refused with their message. Never throws on a
// well-formed JSON object (a defect becomes a refused field or `error`).
FieldTable manifest_field_table(const nlohmann::json& manifest, const std::string& source);

// "168 fields: 120 honoured, 30 checked, 18 ignored, 0 refused"
std::string field_counts_text(const FieldCounts& c);
std::string field_table_to_text(const FieldTable& table);
nlohmann::json field_table_to_json(const FieldTable& table);

}  // namespace lumen::runtime
