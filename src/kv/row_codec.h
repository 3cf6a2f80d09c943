// Encoding of one cached row (keys or values of one position, all KV heads) in a storage
// element type, and decoding of a slice of it (one head) back to f32. Int8/Int4 rows are
// [codes][one f32 scale per block]; int4 codes are offset binary (code = q + 8), low nibble
// first.
#pragma once

#include <cstdint>

#include "kv/kv_config.h"

namespace lumen::kv {

// Bytes one row of n elements takes (keys or values alone).
int64_t row_bytes(KvElem e, int64_t n, int block_size);

void encode_row(KvElem e, const float* src, int64_t n, int block_size, uint8_t* dst);

// Elements [offset, offset + count) of an encoded row of n elements, as f32. For Int8/Int4,
// offset and count are multiples of block_size.
void decode_row_slice(KvElem e, const uint8_t* row, int64_t n, int block_size, int64_t offset, int64_t count,
                      float* dst);

// Rounds src through the element type in place (what storing and reading back gives).
void round_trip_row(KvElem e, float* data, int64_t n, int block_size);

}  // namespace lumen::kv
