// TFLite models (FlatBuffer, identifier "TFL3"), read in place: a bare .tflite file or a
// TFLiteModel section of a .litertlm package. Field ids follow the TFLite schema.fbs:
//   Model: 0 version, 2 subgraphs, 3 description, 4 buffers, 7 signature_defs,
//          8 external_buffer_groups, 9 external_buffers
//   SubGraph: 0 tensors, 1 inputs, 2 outputs, 3 operators, 4 name
//   Tensor: 0 shape, 1 type, 2 buffer, 3 name, 4 quantization, 5 is_variable,
//           7 shape_signature, 10 external_buffer
//   QuantizationParameters: 0 min, 1 max, 2 scale, 3 zero_point, 4/5 details (union),
//           6 quantized_dimension
//   Buffer: 0 data (inline), 1 offset, 2 size (data outside the FlatBuffer, relative to the
//           start of the model; used when offset > 1)
//   SignatureDef: 0 inputs, 1 outputs, 2 signature_key, 4 subgraph_index;  TensorMap: 0 name,
//           1 tensor_index
//   ExternalBufferGroup: 0 name;  ExternalBuffer: 0 id, 1 group, 2 offset, 3 length, 4 packing
//
// Every reference (buffer index, tensor index, subgraph index, buffer offset/size, quantized
// dimension) is checked when the model is opened; a defect is one lumen::Error line naming the
// model and the field. Nothing is dequantized here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/mapped_file.h"

namespace lumen::formats {

// TFLite TensorType, numbered as schema.fbs numbers it.
enum class TfliteType : int8_t {
  FLOAT32 = 0, FLOAT16 = 1, INT32 = 2, UINT8 = 3, INT64 = 4, STRING = 5, BOOL = 6, INT16 = 7,
  COMPLEX64 = 8, INT8 = 9, FLOAT64 = 10, COMPLEX128 = 11, UINT64 = 12, RESOURCE = 13,
  VARIANT = 14, UINT32 = 15, UINT16 = 16, INT4 = 17, BFLOAT16 = 18, INT2 = 19, UINT4 = 20,
  FLOAT8_E4M3FN = 21, FLOAT8_E5M2 = 22,
};
// "FLOAT32", ...; nullptr for a value outside the enum.
const char* tflite_type_name(TfliteType type);
// Bits per element for fixed-size types (4 for INT4/UINT4, 2 for INT2); 0 for STRING,
// RESOURCE, VARIANT.
int tflite_type_bits(TfliteType type);

struct TfliteQuantization {
  std::vector<float> scale;
  std::vector<int64_t> zero_point;
  std::vector<float> min, max;
  int32_t quantized_dimension = 0;
  uint8_t details_type = 0;  // 0 none, 1 CustomQuantization, 2 Blockwise, 3 MultiAxis
  // BlockwiseQuantization (details type 2): 0 scales (a tensor index of the same subgraph),
  // 1 zero_points (tensor index, -1 none), 2 block_size.
  int32_t block_scales = -1, block_zero_points = -1, block_size = 0;
  bool per_channel() const { return scale.size() > 1; }
};

struct TfliteTensor {
  std::string name;
  TfliteType type = TfliteType::FLOAT32;
  std::vector<int32_t> shape;
  std::vector<int32_t> shape_signature;  // empty when absent
  uint32_t buffer = 0;
  uint32_t external_buffer = 0;  // 0: none
  bool is_variable = false;
  std::optional<TfliteQuantization> quantization;  // absent or empty -> nullopt
};

struct TfliteSubgraph {
  std::string name;
  std::vector<TfliteTensor> tensors;
  std::vector<int32_t> inputs, outputs;
  uint32_t num_operators = 0;
};

struct TfliteTensorRef {
  std::string name;
  uint32_t tensor_index = 0;
};

struct TfliteSignature {
  std::string key;
  uint32_t subgraph_index = 0;
  std::vector<TfliteTensorRef> inputs, outputs;
};

// Where a buffer's bytes are.
enum class BufferStorage { Empty, Inline, Offset };

struct TfliteBuffer {
  BufferStorage storage = BufferStorage::Empty;
  uint64_t offset = 0;  // from the start of the model (Inline: where the data vector starts)
  uint64_t size = 0;
};

struct TfliteExternalBuffer {
  uint32_t id = 0;
  uint32_t group = 0;
  uint64_t offset = 0, length = 0;
  std::string packing;
};

class TfliteModel {
 public:
  // Parses the model in [data, data + size); the bytes must outlive the model. `where` names
  // it in errors ("model.tflite", "pkg.litertlm: section 1 (TFLiteModel)").
  static TfliteModel parse(const std::byte* data, size_t size, const std::string& where);

  uint32_t version = 0;
  std::string description;
  std::vector<TfliteSubgraph> subgraphs;
  std::vector<TfliteBuffer> buffers;
  std::vector<TfliteSignature> signatures;
  std::vector<std::string> external_buffer_groups;
  std::vector<TfliteExternalBuffer> external_buffers;

  const std::string& where() const { return where_; }
  size_t size() const { return size_; }
  // The bytes of a tensor's buffer inside this model (empty span for no data); tensors with
  // external buffers live in another section (see LitertlmFile::external_tensor_bytes).
  std::string_view tensor_bytes(const TfliteTensor& tensor) const;
  // Bytes a tensor of this type and shape occupies: 0 when not fixed-size or dynamic (a -1
  // dimension), UINT64_MAX for a shape too large to exist.
  static uint64_t expected_bytes(const TfliteTensor& tensor);

 private:
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string where_;
};

// A bare .tflite file, memory-mapped.
class TfliteFile {
 public:
  static TfliteFile open(const std::string& path);
  const TfliteModel& model() const { return model_; }
  const MappedFile& file() const { return *file_; }

 private:
  std::unique_ptr<MappedFile> file_;
  TfliteModel model_;
};

// One-line summary of a tensor's quantization ("per-channel dim 0: 256 scales, zero points 0").
std::string quantization_summary(const TfliteQuantization& q);

nlohmann::json tflite_to_json(const TfliteModel& model);
std::string tflite_to_text(const TfliteModel& model, const std::string& indent = "");

}  // namespace lumen::formats
