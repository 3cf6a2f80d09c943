// Measurements of the machine's limits that the benchmark reports against: memory read
// bandwidth (all pool threads streaming a buffer much larger than the caches) and int8
// multiply-accumulate peak (all pool threads running independent int8 dot instructions of
// the best ISA: vpdpbusd zmm with AVX-512 VNNI, else vpmaddubsw/vpmaddwd ymm).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu_features.h"

namespace lumen::kernels {

// Bytes per second, best of `repeats` passes over a `bytes` buffer.
double measure_read_bandwidth(size_t bytes = size_t(1) << 30, int repeats = 3);
// Int8 operations per second (a multiply-add counts 2), best of `repeats` timed runs.
// per_core_cpu (optional): the same per CPU-second of one thread (thread CPU time), which
// does not depend on how much of the machine other processes take.
double measure_int8_peak(Isa isa, int repeats = 3, double* per_core_cpu = nullptr);

namespace detail {
// Each returns a value that depends on every byte / every product, so nothing is elided.
uint64_t read_sum_avx2(const void* data, size_t bytes);
uint64_t read_sum_avx512(const void* data, size_t bytes);
// Runs `iterations` x 12 independent int8 dot instructions; returns MACs done.
double int8_macs_avx2(long iterations, int* sink);
double int8_macs_avx512(long iterations, int* sink);
}  // namespace detail

}  // namespace lumen::kernels
