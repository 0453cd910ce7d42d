// Internal to kernels: the functions each SIMD translation unit defines, so that a level's table
// (built in its matmul file) can name the vector operations defined in its vector_ops file.
//
// Only declarations live here on purpose: an inline function defined in a header and compiled into
// an -mavx512f file could be the copy the linker keeps for generic code too, which would then crash
// on CPUs without AVX-512.
#pragma once

#include <cstddef>
#include <cstdint>

#define KVSTASH_DECLARE_VECTOR_OPS(ns)                                                     \
  namespace kvstash::kernels::ns {                                                         \
  void rms_norm(const float* x, const float* weight, int n, float eps, float* out);        \
  void softmax_inplace(float* x, int n);                                                   \
  void silu_mul(const float* gate, const float* up, int n, float* out);                    \
  void add_inplace(float* y, const float* x, int n);                                       \
  float dot_f32(const float* a, const float* b, int n);                                    \
  float dot_f32_f16(const float* a, const std::uint16_t* b, int n);                        \
  void axpy_f16(float alpha, const std::uint16_t* x, float* y, int n);                     \
  void dot_f32_f16_rows(const float* q, int n_heads, const std::uint16_t* rows,           \
                        std::size_t row_stride, int n_rows, int n, float scale, float* out,  \
                        std::size_t out_stride);                                             \
  void axpy_f16_rows(const float* alpha, std::size_t alpha_stride, int n_heads,             \
                     const std::uint16_t* rows, std::size_t row_stride, int n_rows, int n,   \
                     float* y);                                                              \
  void f32_to_f16_row(const float* x, std::uint16_t* out, int n);                          \
  void f16_to_f32_row(const std::uint16_t* x, float* out, int n);                          \
  std::uint64_t read_sum(const void* data, std::size_t bytes);                             \
  }

KVSTASH_DECLARE_VECTOR_OPS(avx2)
KVSTASH_DECLARE_VECTOR_OPS(avx512)

namespace kvstash::kernels {
struct WeightView;
struct QuantizedActivations;
}  // namespace kvstash::kernels

namespace kvstash::kernels::avx2 {
// Rows [row_begin, row_end) (whole 16-row groups) of an interleaved matrix whose layout the AVX2
// kernels multiply (interleaved_avx2.cc); false, and nothing written, for the other layouts.
bool interleaved_rows(const WeightView& w, const QuantizedActivations& xq, int n_tokens, std::int64_t row_begin,
                      std::int64_t row_end, float* y, std::int64_t y_stride);
}  // namespace kvstash::kernels::avx2
