#include "kernels/prefill.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/thread_pool.h"
#include "quant/repack.h"

namespace lumen::kernels {

// ---- Activation forms -------------------------------------------------------------------

namespace {

int64_t act_blocks_of(int64_t cols) { return (cols + 31) / 32; }
int64_t chunks_of(int64_t cols) { return quant::padded_cols(cols) / quant::kChunk; }

size_t blocks_bytes(int64_t cols) { return size_t(act_blocks_of(cols)) * sizeof(ActBlock); }
size_t blocks_split_bytes(int64_t cols) { return 2 * blocks_bytes(cols); }
size_t chunks_bytes(int64_t cols) { return size_t(chunks_of(cols)) * sizeof(ActChunk); }
size_t chunks_split_bytes(int64_t cols) { return 2 * chunks_bytes(cols); }

void quantize_blocks(const float* x, int64_t cols, std::byte* out, Isa isa) {
  quantize_act_blocks(x, cols, reinterpret_cast<ActBlock*>(out), isa);
}

// hi = the blocks of x; lo = the blocks of the residual x - d * q, formed here (one baseline-
// compiled piece of code for every ISA, so both halves are bit-identical everywhere).
void quantize_blocks_split(const float* x, int64_t cols, std::byte* out, Isa isa) {
  auto* hi = reinterpret_cast<ActBlock*>(out);
  const int64_t nb = act_blocks_of(cols);
  ActBlock* lo = hi + nb;
  quantize_act_blocks(x, cols, hi, isa);
  float residual[32];
  for (int64_t b = 0; b < nb; ++b) {
    for (int i = 0; i < 32; ++i) {
      const int64_t c = b * 32 + i;
      residual[i] = c < cols ? x[c] - float(hi[b].q[i]) * hi[b].d : 0.0f;
    }
    quantize_act_blocks(residual, 32, lo + b, isa);
  }
}

void quantize_chunks(const float* x, int64_t cols, std::byte* out, Isa isa) {
  quantize_activations(x, cols, reinterpret_cast<ActChunk*>(out), isa);
}

void quantize_chunks_split(const float* x, int64_t cols, std::byte* out, Isa isa) {
  auto* hi = reinterpret_cast<ActChunk*>(out);
  quantize_activations_split(x, cols, hi, hi + chunks_of(cols), isa);
}

}  // namespace

const ActFormat kActBlocks{"int8 blocks", 1, blocks_bytes, quantize_blocks};
const ActFormat kActBlocksSplit{"int8x2 blocks", 2, blocks_split_bytes, quantize_blocks_split};
const ActFormat kActChunks{"int8 chunks", 1, chunks_bytes, quantize_chunks};
const ActFormat kActChunksSplit{"int8x2 chunks", 2, chunks_split_bytes, quantize_chunks_split};

void detail::quantize_act_blocks_scalar(const float* x, int64_t cols, ActBlock* out) {
  for (int64_t b = 0; b < act_blocks_of(cols); ++b) {
    float v[32];
    for (int i = 0; i < 32; ++i) v[i] = b * 32 + i < cols ? x[b * 32 + i] : 0.0f;
    float amax = 0.0f;
    for (float e : v) amax = std::max(amax, std::fabs(e));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      out[b].q[i] = int8_t(std::nearbyint(v[i] * id));  // to nearest even, as quantize_chunk_*
      sum += out[b].q[i];
    }
    out[b].d = amax / 127.0f;
    out[b].neg8 = -8 * sum;
    out[b].neg128 = -128 * sum;
    out[b].unused = 0;
  }
}

void quantize_act_blocks(const float* x, int64_t cols, ActBlock* out, Isa isa) {
  // SIMD versions take whole blocks; a partial last block goes through the scalar code.
  const int64_t full = cols / 32;
  if (isa == Isa::Avx512) detail::quantize_act_blocks_avx512(x, full * 32, out);
  else if (isa == Isa::Avx2) detail::quantize_act_blocks_avx2(x, full * 32, out);
  else detail::quantize_act_blocks_scalar(x, full * 32, out);
  if (full * 32 < cols) detail::quantize_act_blocks_scalar(x + full * 32, cols - full * 32, out + full);
}

// ---- R16 slabs ----------------------------------------------------------------------------

size_t detail::r16_slab_bytes(int64_t k0, int64_t k1) { return size_t((k1 - k0 + 31) / 32) * kR16BlockBytes; }

namespace {

// Blocks of a prepared range: the stored columns end at cols (X4 pads to 128 with zeros).
int64_t r16_blocks(const quant::WeightMatrix& w, int64_t k0, int64_t k1) {
  return (std::min(k1, w.cols) - k0 + 31) / 32;
}

// Writes one 32-column block of one 4-row group into the prepared block `dst`: rows
// 4 gi .. 4 gi + 3. src_lo / src_hi: row r's 16 bytes at + r * row_stride. Q4: one source,
// low nibbles -> dwords 0..3, high nibbles -> dwords 4..7. Q8: half A -> 0..3, half B -> 4..7,
// each + 128.
template <bool Q4>
void put_group_block(const std::byte* src_a, const std::byte* src_b, size_t row_stride, int gi, std::byte* dst) {
#if defined(__SSE2__)
  __m128i r[4], v[4];
  auto transpose = [&](const std::byte* src) {
    for (int i = 0; i < 4; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * row_stride));
    const __m128i t0 = _mm_unpacklo_epi32(r[0], r[1]), t1 = _mm_unpacklo_epi32(r[2], r[3]);
    const __m128i t2 = _mm_unpackhi_epi32(r[0], r[1]), t3 = _mm_unpackhi_epi32(r[2], r[3]);
    v[0] = _mm_unpacklo_epi64(t0, t1);
    v[1] = _mm_unpackhi_epi64(t0, t1);
    v[2] = _mm_unpacklo_epi64(t2, t3);
    v[3] = _mm_unpackhi_epi64(t2, t3);
  };
  auto store = [&](int j, __m128i x) { _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j * 64 + gi * 16), x); };
  transpose(src_a);
  if constexpr (Q4) {
    const __m128i low4 = _mm_set1_epi8(0x0f);
    for (int j = 0; j < 4; ++j) {
      store(j, _mm_and_si128(v[j], low4));
      store(4 + j, _mm_and_si128(_mm_srli_epi16(v[j], 4), low4));
    }
  } else {
    const __m128i flip = _mm_set1_epi8(char(0x80));
    for (int j = 0; j < 4; ++j) store(j, _mm_xor_si128(v[j], flip));
    transpose(src_b);
    for (int j = 0; j < 4; ++j) store(4 + j, _mm_xor_si128(v[j], flip));
  }
#else
  auto* d = reinterpret_cast<uint8_t*>(dst);
  for (int r = 0; r < 4; ++r) {
    const auto* a = reinterpret_cast<const uint8_t*>(src_a + r * row_stride);
    const auto* b = reinterpret_cast<const uint8_t*>(src_b + r * row_stride);
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 4; ++k) {
        uint8_t* lane = d + (gi * 4 + r) * 4 + k;
        if constexpr (Q4) {
          lane[j * 64] = a[4 * j + k] & 0x0f;
          lane[(4 + j) * 64] = a[4 * j + k] >> 4;
        } else {
          lane[j * 64] = uint8_t(a[4 * j + k] ^ 0x80);
          lane[(4 + j) * 64] = uint8_t(b[4 * j + k] ^ 0x80);
        }
      }
  }
#endif
}

template <bool Q4>
void prepare_r16(const quant::WeightMatrix& w, int64_t slab, int64_t k0, int64_t k1, std::byte* scratch) {
  const size_t chunk_bytes = Q4 ? quant::kQ4x4ChunkBytes : quant::kQ8x4ChunkBytes;
  const size_t row_bytes = Q4 ? 64 : 128;  // one row's quants within a chunk
  const int64_t chunks = chunks_of(w.cols);
  const int64_t groups = quant::padded_rows(w.rows) / quant::kRowGroup;
  const auto* base = static_cast<const std::byte*>(w.data);
  const int64_t nb = r16_blocks(w, k0, k1);
  for (int gi = 0; gi < 4; ++gi) {
    const int64_t g = slab * 4 + gi;
    for (int64_t kb = 0; kb < nb; ++kb) {
      std::byte* dst = scratch + size_t(kb) * kR16BlockBytes;
      auto* dw = reinterpret_cast<float*>(dst + 512);
      if (g >= groups) {  // rows past the matrix: zero weights and scales
        for (int j = 0; j < 8; ++j) std::memset(dst + j * 64 + gi * 16, 0, 16);
        for (int r = 0; r < 4; ++r) dw[gi * 4 + r] = 0.0f;
        continue;
      }
      const int64_t col_block = k0 / 32 + kb, c = col_block / 4, b = col_block % 4;
      const std::byte* ch = base + size_t(g * chunks + c) * chunk_bytes;
      const std::byte* q = ch + 32 + b * 16;
      put_group_block<Q4>(q, q + 64, row_bytes, gi, dst);
      for (int r = 0; r < 4; ++r) {
        uint16_t h;
        std::memcpy(&h, ch + (r * 4 + b) * 2, 2);
        dw[gi * 4 + r] = f16_to_f32(h);
      }
    }
  }
}

}  // namespace

void detail::prepare_r16_q4(const quant::WeightMatrix& w, int64_t slab, int64_t k0, int64_t k1, std::byte* scratch) {
  prepare_r16<true>(w, slab, k0, k1, scratch);
}
void detail::prepare_r16_q8(const quant::WeightMatrix& w, int64_t slab, int64_t k0, int64_t k1, std::byte* scratch) {
  prepare_r16<false>(w, slab, k0, k1, scratch);
}

void detail::r16_tile_scalar(const PrefillTileArgs& a, bool corr_q8) {
  const int64_t nb = r16_blocks(*a.w, a.k0, a.k1), kb0 = a.k0 / 32;
  for (int t = 0; t < a.nt; ++t) {
    const auto* act = reinterpret_cast<const ActBlock*>(a.act + size_t(t) * a.act_stride) + kb0;
    float acc[kR16Rows] = {};
    for (int64_t kb = 0; kb < nb; ++kb) {
      const auto* w = reinterpret_cast<const uint8_t*>(a.scratch + size_t(kb) * kR16BlockBytes);
      const auto* dw = reinterpret_cast<const float*>(a.scratch + size_t(kb) * kR16BlockBytes + 512);
      const ActBlock& x = act[kb];
      for (int r = 0; r < kR16Rows; ++r) {
        int32_t sum = corr_q8 ? x.neg128 : x.neg8;
        for (int j = 0; j < 8; ++j)
          for (int k = 0; k < 4; ++k) sum += int32_t(w[j * 64 + r * 4 + k]) * x.q[4 * j + k];
        acc[r] = std::fma(float(sum), dw[r] * x.d, acc[r]);
      }
    }
    std::copy(acc, acc + kR16Rows, a.out + t * kR16Rows);
  }
}

// ---- X4 tiles read in place (the 4 x 2 tiles of qmatmul.h) ---------------------------------

namespace {

template <detail::QTileFn Fn, bool Q4>
void x4_tile(const PrefillTileArgs& a) {
  const size_t chunk_bytes = Q4 ? quant::kQ4x4ChunkBytes : quant::kQ8x4ChunkBytes;
  const int64_t c0 = a.k0 / quant::kChunk, chunks = (a.k1 - a.k0) / quant::kChunk;
  const std::byte* group =
      static_cast<const std::byte*>(a.w->data) + size_t(a.slab * chunks_of(a.w->cols) + c0) * chunk_bytes;
  const ActChunk* acts[2];
  for (int t = 0; t < 2; ++t)
    acts[t] = reinterpret_cast<const ActChunk*>(a.act + size_t(std::min(t, a.nt - 1)) * a.act_stride) + c0;
  float out[2][4];
  Fn(group, chunks, acts, a.nt, out);
  for (int t = 0; t < a.nt; ++t)
    for (int r = 0; r < 4; ++r) a.out[t * 4 + r] = out[t][r];
}

void r16_q4_scalar(const PrefillTileArgs& a) { detail::r16_tile_scalar(a, false); }
void r16_q4_avx512(const PrefillTileArgs& a) { detail::r16_tile_avx512(a, false); }
void r16_q8_avx512(const PrefillTileArgs& a) { detail::r16_tile_avx512(a, true); }

constexpr int kR16Tokens = 16;

const PrefillKernel kR16Q4Scalar{"r16-q4 scalar", &kActBlocks, kR16Rows, kR16Tokens, detail::r16_slab_bytes,
                                 detail::prepare_r16_q4, r16_q4_scalar};
const PrefillKernel kR16Q4Avx2{"r16-q4 avx2", &kActBlocks, kR16Rows, kR16Tokens, detail::r16_slab_bytes,
                               detail::prepare_r16_q4, detail::r16_tile_avx2};
const PrefillKernel kR16Q4Avx512{"r16-q4 avx512", &kActBlocks, kR16Rows, kR16Tokens, detail::r16_slab_bytes,
                                 detail::prepare_r16_q4, r16_q4_avx512};
const PrefillKernel kR16Q8Avx512{"r16-q8 avx512", &kActBlocks, kR16Rows, kR16Tokens, detail::r16_slab_bytes,
                                 detail::prepare_r16_q8, r16_q8_avx512};
const PrefillKernel kR16Q8SplitAvx512{"r16-q8x2 avx512", &kActBlocksSplit, kR16Rows, kR16Tokens, detail::r16_slab_bytes,
                                      detail::prepare_r16_q8, r16_q8_avx512};

#define LUMEN_X4_KERNEL(var, label, act, fn, q4) \
  const PrefillKernel var{label, &act, quant::kRowGroup, 2, nullptr, nullptr, x4_tile<detail::fn, q4>};
LUMEN_X4_KERNEL(kX4Q4Scalar, "x4-q4 scalar", kActChunks, q4_tile_scalar, true)
LUMEN_X4_KERNEL(kX4Q4Avx2, "x4-q4 avx2", kActChunks, q4_tile_avx2, true)
LUMEN_X4_KERNEL(kX4Q4Avx512, "x4-q4 avx512", kActChunks, q4_tile_avx512, true)
LUMEN_X4_KERNEL(kX4Q8Scalar, "x4-q8 scalar", kActChunks, q8_tile_scalar, false)
LUMEN_X4_KERNEL(kX4Q8Avx2, "x4-q8 avx2", kActChunks, q8_tile_avx2, false)
LUMEN_X4_KERNEL(kX4Q8Avx512, "x4-q8 avx512", kActChunks, q8_tile_avx512, false)
LUMEN_X4_KERNEL(kX4Q8SplitScalar, "x4-q8x2 scalar", kActChunksSplit, q8_tile_scalar, false)
LUMEN_X4_KERNEL(kX4Q8SplitAvx2, "x4-q8x2 avx2", kActChunksSplit, q8_tile_avx2, false)
LUMEN_X4_KERNEL(kX4Q8SplitAvx512, "x4-q8x2 avx512", kActChunksSplit, q8_tile_avx512, false)
#undef LUMEN_X4_KERNEL

}  // namespace

const PrefillKernel* prefill_kernel(quant::WeightFormat format, Isa isa, int64_t T, Q8Activations q8_mode) {
  const bool many = T >= kPrefillMinTokensForR16;
  const int i = isa == Isa::Avx512 ? 2 : isa == Isa::Avx2 ? 1 : 0;
  if (format == quant::WeightFormat::Q4_0X4) {
    static const PrefillKernel* const r16[] = {&kR16Q4Scalar, &kR16Q4Avx2, &kR16Q4Avx512};
    static const PrefillKernel* const x4[] = {&kX4Q4Scalar, &kX4Q4Avx2, &kX4Q4Avx512};
    return many ? r16[i] : x4[i];
  }
  if (format == quant::WeightFormat::Q8_0X4) {
    const bool split = q8_mode == Q8Activations::Int8x2;
    // Q8 weights + 128 reach 255: the AVX2 tile's int16 pair sums would overflow, so only
    // AVX-512 (32-bit accumulation) takes R16 slabs; the others keep the X4 tile.
    if (many && isa == Isa::Avx512) return split ? &kR16Q8SplitAvx512 : &kR16Q8Avx512;
    static const PrefillKernel* const x4[] = {&kX4Q8Scalar, &kX4Q8Avx2, &kX4Q8Avx512};
    static const PrefillKernel* const x4s[] = {&kX4Q8SplitScalar, &kX4Q8SplitAvx2, &kX4Q8SplitAvx512};
    return split ? x4s[i] : x4[i];
  }
  return nullptr;
}

// ---- The driver ---------------------------------------------------------------------------

namespace {

// A 64-byte aligned, growing byte buffer (ActChunk loads are aligned).
class AlignedBytes {
 public:
  std::byte* get(size_t n) {
    if (n > size_) {
      data_.reset(static_cast<std::byte*>(::operator new(n, std::align_val_t(64))));
      size_ = n;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t(64)); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t size_ = 0;
};

// Bytes of the weights a slab-block keeps in L2 while the token tiles pass over it.
constexpr size_t kSlabBlockBytes = 192 << 10;

struct ColumnRanges {
  int64_t n, chunks_per;
  ColumnRanges(int64_t cols) {
    const int64_t chunks = chunks_of(cols);
    const int64_t per_max = kPrefillColumnRange / quant::kChunk;
    n = (chunks + per_max - 1) / per_max;
    chunks_per = (chunks + n - 1) / n;
  }
  int64_t k0(int64_t i) const { return i * chunks_per * quant::kChunk; }
  int64_t k1(int64_t i, int64_t cols) const {
    return std::min(quant::padded_cols(cols), (i + 1) * chunks_per * quant::kChunk);
  }
};

size_t slab_weight_bytes(const PrefillKernel& k, const quant::WeightMatrix& w, int64_t range_cols) {
  if (k.slab_bytes) return k.slab_bytes(0, range_cols);
  const size_t chunk_bytes = w.format == quant::WeightFormat::Q4_0X4 ? quant::kQ4x4ChunkBytes : quant::kQ8x4ChunkBytes;
  return size_t(range_cols / quant::kChunk) * chunk_bytes * size_t(k.slab_rows / quant::kRowGroup);
}

}  // namespace

void prefill_matmul_with(const float* x, int64_t T, std::span<const quant::WeightMatrix* const> ws,
                         std::span<float* const> ys, std::span<const PrefillKernel* const> kernels, Isa isa) {
  if (ws.size() != ys.size() || ws.size() != kernels.size())
    throw Error("prefill_matmul: " + std::to_string(ws.size()) + " matrices, " + std::to_string(ys.size()) +
                " outputs, " + std::to_string(kernels.size()) + " kernels");
  if (ws.empty() || T <= 0) return;
  const int64_t K = ws[0]->cols;
  for (size_t i = 0; i < ws.size(); ++i) {
    if (!kernels[i]) throw Error(std::string("prefill_matmul: no prefill kernel for format ") +
                                 quant::format_name(ws[i]->format));
    if (ws[i]->cols != K) throw Error("prefill_matmul: matrices sharing an input must have the same columns");
    if (kernels[i]->max_tokens % kernels[i]->act->virtual_tokens != 0)
      throw Error(std::string("prefill_matmul: kernel ") + kernels[i]->name + " splits a token's halves");
  }

  // Each distinct activation form once, over all T tokens.
  constexpr size_t kMaxForms = 4;
  const ActFormat* forms[kMaxForms];
  std::byte* form_data[kMaxForms];
  size_t form_stride[kMaxForms];
  size_t n_forms = 0;
  std::vector<size_t> form_of(ws.size());
  thread_local AlignedBytes act_buffers[kMaxForms];
  for (size_t i = 0; i < ws.size(); ++i) {
    size_t f = 0;
    while (f < n_forms && forms[f] != kernels[i]->act) ++f;
    if (f == n_forms) {
      if (n_forms == kMaxForms) throw Error("prefill_matmul: more than 4 activation forms in one call");
      forms[f] = kernels[i]->act;
      // Strides stay as the form says: a split form's halves are exactly half of it.
      form_stride[f] = forms[f]->bytes_per_token(K);
      form_data[f] = act_buffers[f].get(form_stride[f] * size_t(T));
      ++n_forms;
    }
    form_of[i] = f;
  }
  ThreadPool& pool = ThreadPool::global();
  pool.parallel_for(T, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (size_t f = 0; f < n_forms; ++f) forms[f]->quantize(x + t * K, K, form_data[f] + size_t(t) * form_stride[f], isa);
  });

  // Pieces: (matrix, block of slabs), the blocks sized so their weights stay in L2.
  const ColumnRanges ranges(K);
  const int64_t range_cols = ranges.chunks_per * quant::kChunk;
  struct Piece {
    int32_t matrix;
    int64_t s0, s1;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < ws.size(); ++i) {
    const PrefillKernel& k = *kernels[i];
    const int64_t slabs = (quant::padded_rows(ws[i]->rows) + k.slab_rows - 1) / k.slab_rows;
    const int64_t per = std::clamp<int64_t>(int64_t(kSlabBlockBytes / slab_weight_bytes(k, *ws[i], range_cols)), 1, slabs);
    for (int64_t s = 0; s < slabs; s += per) pieces.push_back({int32_t(i), s, std::min(slabs, s + per)});
  }

  auto run_piece = [&](const Piece& p) {
    const quant::WeightMatrix& w = *ws[size_t(p.matrix)];
    const PrefillKernel& k = *kernels[size_t(p.matrix)];
    const int vpt = k.act->virtual_tokens;
    const int64_t VT = T * vpt, N = w.rows;
    const size_t vstride = form_stride[form_of[size_t(p.matrix)]] / size_t(vpt);
    const std::byte* act = form_data[form_of[size_t(p.matrix)]];
    float* y = ys[size_t(p.matrix)];
    thread_local AlignedBytes scratch_buf;
    thread_local std::vector<float> out;
    out.resize(size_t(k.max_tokens * k.slab_rows));
    for (int64_t ri = 0; ri < ranges.n; ++ri) {
      const int64_t k0 = ranges.k0(ri), k1 = ranges.k1(ri, K);
      if (k0 >= k1) break;
      const size_t slab_bytes = k.slab_bytes ? (k.slab_bytes(k0, k1) + 63) / 64 * 64 : 0;
      std::byte* scratch = k.prepare ? scratch_buf.get(slab_bytes * size_t(p.s1 - p.s0)) : nullptr;
      if (k.prepare)
        for (int64_t s = p.s0; s < p.s1; ++s) k.prepare(w, s, k0, k1, scratch + size_t(s - p.s0) * slab_bytes);
      for (int64_t v0 = 0; v0 < VT; v0 += k.max_tokens) {
        const int nt = int(std::min<int64_t>(k.max_tokens, VT - v0));
        for (int64_t s = p.s0; s < p.s1; ++s) {
          PrefillTileArgs args{&w, s, scratch ? scratch + size_t(s - p.s0) * slab_bytes : nullptr,
                               k0, k1, act + size_t(v0) * vstride, vstride, nt, out.data()};
          k.tile(args);
          const int64_t row0 = s * k.slab_rows, rows = std::min<int64_t>(k.slab_rows, N - row0);
          for (int v = 0; v < nt; v += vpt) {
            float* yt = y + ((v0 + v) / vpt) * N + row0;
            const float* o = out.data() + v * k.slab_rows;
            for (int64_t r = 0; r < rows; ++r) {
              const float val = vpt == 2 ? o[r] + o[k.slab_rows + r] : o[r];
              yt[r] = ri == 0 ? val : yt[r] + val;
            }
          }
        }
      }
    }
  };
  pool.parallel_for(int64_t(pieces.size()), [&](int64_t p0, int64_t p1) {
    for (int64_t i = p0; i < p1; ++i) run_piece(pieces[size_t(i)]);
  });
}

void prefill_matmul(const float* x, int64_t T, std::span<const quant::WeightMatrix* const> ws,
                    std::span<float* const> ys, Isa isa, Q8Activations q8_mode) {
  constexpr size_t kMax = 8;
  if (ws.size() > kMax) throw Error("prefill_matmul: at most 8 matrices in one call");
  const PrefillKernel* kernels[kMax];
  for (size_t i = 0; i < ws.size(); ++i) {
    kernels[i] = prefill_kernel(ws[i]->format, isa, T, q8_mode);
    if (!kernels[i]) throw Error(std::string("prefill_matmul: format ") + quant::format_name(ws[i]->format) +
                                 " has no prefill kernel");
  }
  prefill_matmul_with(x, T, ws, ys, std::span(kernels, ws.size()), isa);
}

}  // namespace lumen::kernels
