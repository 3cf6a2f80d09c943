// Decode (one token) matrix-vector products against Q4_0X4 weights, and the fused dispatch of
// several matrices that share one input (q/k/v, gate/up) in a single pool call.
//
// Decode reads every weight byte once per token, so it is bound by memory bandwidth; what
// costs is anything that keeps a core from streaming: per-row float work in the inner loop,
// and the barrier at the end of every pool call (both cores wait for the slower one). So:
//   * the AVX-512 kernel (qmatmul_decode_avx512.cpp) sums the 4 interleaved rows' block
//     products as exact integers into one vector of 16 block sums (4 rows x 4 blocks), then
//     scales and accumulates them with one multiply and one FMA per 128-column chunk (the
//     general kernel converts and scales per row), and prefetches the stream ahead;
//   * matrices sharing an input are one pool call: activations quantized once, their row
//     groups one index space, one barrier instead of three (q/k/v) or two (gate/up).
// Scalar and AVX2 run the general kernel's tiles (qmatmul.h) inside the same fused dispatch.
//
// Q8_0X4 is not handled here (its activation quantization is changing elsewhere); it keeps
// going through qmatmul() one matrix at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/cpu_features.h"
#include "kernels/qmatmul.h"
#include "quant/weight_matrix.h"

namespace lumen::kernels {

// True when qmatvec_q4 can take the matrix (Q4_0X4).
bool decode_kernel_applies(const quant::WeightMatrix& w);

// ys[i][r] = sum_c x[c] W_i[r, c] for Q4_0X4 matrices that all have x's length (cols) as
// columns: one activation quantization, one pool call. Throws lumen::Error otherwise.
void qmatvec_q4(const float* x, std::span<const quant::WeightMatrix* const> ws, std::span<float* const> ys, Isa isa);
// The same with an input per matrix (xs[i] for W_i; equal pointers are quantized once): the
// matrices still share one pool call (a decode step's chosen experts' down projections).
void qmatvec_q4_each(std::span<const float* const> xs, std::span<const quant::WeightMatrix* const> ws,
                     std::span<float* const> ys, Isa isa);

// y_i = W_i x_i, one token each: one fused call when every matrix is Q4_0X4 with the same
// columns (at most 8), otherwise kernels::matmul on each (same results either way, up to the
// ISA's f32 summation order).
void matvec_each(std::span<const float* const> xs, std::span<const quant::WeightMatrix* const> ws,
                 std::span<float* const> ys);

// y = W x for matrices sharing the input x [T, cols]: one fused call when every matrix is
// Q4_0X4 and T == 1; one prefill_matmul call (prefill.h: activations quantized once) when
// T > 1 and every matrix has a prefill kernel; otherwise kernels::matmul on each.
void matmul_shared_input(const float* x, int64_t T, std::span<const quant::WeightMatrix* const> ws,
                         std::span<float* const> ys);

namespace detail {
// Rows [4 g0, 4 g1) of one Q4_0X4 matrix against one token's activations (T = 1), AVX-512.
// y: the matrix's output vector (rows beyond `rows` are not written).
void q4_decode_groups_avx512(const std::byte* base, int64_t chunks, const ActChunk* act, int64_t g0, int64_t g1,
                             int64_t rows, float* y);
// The exact integer block sums the AVX-512 decode kernel forms for one row group, before any
// scaling: out[c * 16 + b * 4 + r] = sum over block b of chunk c of (nibble - 8) * activation,
// row r (tests compare them with the scalar reference bit for bit).
void q4_decode_block_sums_avx512(const std::byte* group, int64_t chunks, const ActChunk* act, int32_t* out);
}  // namespace detail

}  // namespace lumen::kernels
