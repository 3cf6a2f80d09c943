// The AVX-512 prefill kernels compiled through SIMDe (see simde_avx512_shim.h); the tests in
// test_prefill.cpp compare them with the scalar reference on every machine with AVX2.
#ifdef LUMEN_TEST_SIMDE_AVX512
#include "../../src/kernels/prefill_avx512.cpp"
#include "../../src/kernels/block_matmul_avx512.cpp"
#include "../../src/kernels/bf16_matmul_avx512bf16.cpp"
#endif
