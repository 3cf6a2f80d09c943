// `lumen quantize`: a model in, a standard GGUF out (llama.cpp's gemma3 / gemma4 layout),
// each tensor in the type llama.cpp's mix for the file type gives it (quant/quant_mix.h),
// quantized by Lumen's searching quantizers (quant/quantize.h), optionally weighted by an
// imatrix (quant/imatrix.h).
//
// Sources: a GGUF (any tensor types; quantized ones only with allow_requantize, as
// llama-quantize); a Gemma 4 Hugging Face checkpoint directory (any float dtype) or a packed
// .lmp (its tokenizer.json beside it), given the metadata, vocabulary and tensor names
// llama.cpp's convert_hf_to_gguf.py writes, so the output equals what llama-quantize makes of
// the converter's file. `--quant` at load and `lumen convert` use the same mix and quantizers
// (model/quantize_weights.h).
//
// Streaming: tensors are read, quantized and written a slab of rows at a time (about 64 MiB
// of f32 per slab, rows spread over the thread pool), so memory stays bounded whatever the
// model's size. The output goes to a temp file renamed at the end; on any error nothing is
// left at OUT.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "formats/gguf_writer.h"
#include "quant/quant_mix.h"

namespace lumen::runtime {

// A model's tensors under their GGUF names, with the metadata a GGUF of it carries.
class ModelSource {
 public:
  struct Tensor {
    std::string name;
    int type = 0;               // ggml type as stored
    std::vector<int64_t> ne;    // fastest-varying first
  };
  virtual ~ModelSource() = default;
  virtual const std::string& path() const = 0;
  virtual const formats::GgufMetadata& metadata() const = 0;
  virtual const std::vector<Tensor>& tensors() const = 0;
  // Rows [r0, r1) of tensor i (row length ne[0]) as f32.
  virtual void read_rows(size_t i, int64_t r0, int64_t r1, float* out) const = 0;
  // Tensor i's bytes as a GGUF holds them (its `type` rows back to back), or nullptr when
  // the source must convert them (read_rows).
  virtual const std::byte* raw(size_t i) const = 0;
};

// A GGUF file, its metadata and tensors as they are.
std::unique_ptr<ModelSource> open_gguf_source(const std::string& path);
// A Gemma 4 checkpoint directory or a packed .lmp, as llama.cpp's converter would write it.
std::unique_ptr<ModelSource> open_checkpoint_source(const std::string& path);
// Any source: a .gguf, a packed .lmp or a checkpoint directory.
std::unique_ptr<ModelSource> open_model_source(const std::string& path);

struct QuantizeOptions {
  quant::FileType type = quant::FileType::Q4_K_M;
  std::string imatrix;  // imatrix file, "" for none
  std::vector<quant::TensorTypeOverride> overrides;
  bool allow_requantize = false;
  // Called as bytes are written (done, total).
  std::function<void(uint64_t, uint64_t)> progress;
};

struct QuantizeResult {
  struct Entry {
    std::string name;
    int from = 0, to = 0;  // ggml types
    bool imatrix = false;  // quantized with importance weights
  };
  std::vector<Entry> tensors;  // in output order
  uint64_t bytes_out = 0;
  int64_t elements = 0;        // of all tensors
  int imatrix_entries = 0;
};

// Throws lumen::Error (one line naming the file, tensor, entry or flag) before writing
// anything when the source, the imatrix or the options are bad.
QuantizeResult quantize_model(const ModelSource& source, const std::string& out, const QuantizeOptions& options);

// The ggml type of each tensor of `source` under `options` (the mix, overrides,
// fallbacks), in the source's tensor order: what quantize_model would write.
std::vector<int> planned_types(const ModelSource& source, const QuantizeOptions& options, bool has_imatrix);

}  // namespace lumen::runtime
