// The portable implementations: the fallback on CPUs without AVX2 and the readable statement of
// what each vector kernel computes. Built without any -m flag.
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "kernels/interleaved16.h"
#include "kernels/mxfp4.h"
#include "kernels/quant_formats.h"
#include "kernels/simd_dispatch.h"

namespace kvstash::kernels {
namespace {

float load_f16_scale(const std::uint8_t* block) {
  std::uint16_t h;
  std::memcpy(&h, block, 2);
  return f16_to_f32(h);
}

float weight_at(const WeightView& w, const std::uint8_t* row, std::int64_t c) {
  std::uint16_t h;
  switch (w.type) {
    case WeightType::kF32: {
      float f;
      std::memcpy(&f, row + c * 4, 4);
      return f;
    }
    case WeightType::kF16:
      std::memcpy(&h, row + c * 2, 2);
      return f16_to_f32(h);
    case WeightType::kBF16:
      std::memcpy(&h, row + c * 2, 2);
      return bf16_to_f32(h);
    case WeightType::kQ8_0: {
      const std::uint8_t* block = row + c / kQ8_0BlockElems * kQ8_0BlockBytes;
      return load_f16_scale(block) * static_cast<float>(static_cast<std::int8_t>(block[2 + c % kQ8_0BlockElems]));
    }
    default: break;
  }
  float value = 0.0f;
  with_slice_type(w.type, [&]<WeightType kType>() {
    int s;
    const std::uint8_t* block = slice_block<kType>(row, c / kSliceElems, &s);
    const int l = static_cast<int>(c % kSliceElems);
    const SliceParams p = slice_params<kType>(block, s);
    value = p.scale[l / 16] * static_cast<float>(slice_value<kType>(block, s, l)) - p.min[l / 16];
  });
  return value;
}

// A slice-form row against quantized activations, as the SIMD kernels compute it: per half slice
// the exact integer dot product, scaled by the weight scale and the activation scale, less the
// min times the half slice's activation sum.
template <WeightType kType>
float slice_row_dot(const std::uint8_t* row, std::int64_t cols, const QuantizedActivations& xq, int t) {
  const float* x_scales = xq.scales + t * (cols / kSliceElems);
  const std::int8_t* x_values = xq.values + t * cols;
  const float* lane_sums = xq.lane_sums + t * (cols / 4);
  float acc = 0.0f;
  for (std::int64_t slice = 0; slice < cols / kSliceElems; ++slice) {
    int s;
    const std::uint8_t* block = slice_block<kType>(row, slice, &s);
    const SliceParams p = slice_params<kType>(block, s);
    for (int h = 0; h < 2; ++h) {
      std::int32_t isum = 0;
      for (int l = h * 16; l < h * 16 + 16; ++l) isum += slice_value<kType>(block, s, l) * x_values[slice * 32 + l];
      const float* ls = lane_sums + slice * 8 + h * 4;
      acc += p.scale[h] * x_scales[slice] * static_cast<float>(isum) - p.min[h] * (ls[0] + ls[1] + ls[2] + ls[3]);
    }
  }
  return acc;
}

float q8_0_row_dot(const std::uint8_t* row, std::int64_t cols, const float* x_scales, const std::int8_t* x_values) {
  float acc = 0.0f;
  for (std::int64_t b = 0; b < cols / kQ8_0BlockElems; ++b) {
    const std::uint8_t* block = row + b * kQ8_0BlockBytes;
    const auto* q = reinterpret_cast<const std::int8_t*>(block + 2);
    std::int32_t isum = 0;
    for (int i = 0; i < kQ8_0BlockElems; ++i) isum += q[i] * x_values[b * kQ8_0BlockElems + i];
    acc += load_f16_scale(block) * x_scales[b] * static_cast<float>(isum);
  }
  return acc;
}

// Row r of an interleaved Q8_0 matrix, exactly as interleaved16.h states every path computes it.
float q8_0x16_row_dot(const WeightView& w, std::int64_t r, const float* x_scales, const std::int8_t* x_values) {
  const auto* data = static_cast<const std::uint8_t*>(w.data);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < w.cols / kQ8_0BlockElems; ++b) {
    std::int32_t isum = 0;
    for (int c = 0; c < kQ8_0BlockElems; ++c) {
      isum += q8x16::weight(data, w.cols, r, b * kQ8_0BlockElems + c) * x_values[b * kQ8_0BlockElems + c];
    }
    const float scale = f16_to_f32(q8x16::scale_bits(data, w.cols, r, b)) * x_scales[b];
    acc = std::fma(static_cast<float>(isum), scale, acc);
  }
  return acc;
}

// Row r of a kQ4_Kx16 or kQ5_Kx16 matrix, exactly as interleaved16.h states every path computes
// it, against one token's activations quantized per 256 (x_scales per super-block, x_sums32 per 32
// values).
float q4_kx16_row_dot(const WeightView& w, std::int64_t r, const float* x_scales, const std::int8_t* x_values,
                      const std::int16_t* x_sums32) {
  const auto* data = static_cast<const std::uint8_t*>(w.data);
  const bool fifth = w.type == WeightType::kQ5_Kx16;
  float acc = 0.0f;
  for (std::int64_t s = 0; s < w.cols / 256; ++s) {
    const q8x16::q4k::RowFields f = q8x16::q4k::fields(data, fifth, w.cols, r, s);
    std::int32_t isc = 0, imn = 0;
    for (int j = 0; j < 8; ++j) {
      const std::int64_t c0 = s * 256 + j * 32;
      std::int32_t isum = 0;
      for (std::int64_t c = c0; c < c0 + 32; ++c) isum += q8x16::q4k::code(data, fifth, w.cols, r, c) * x_values[c];
      isc += f.sc[j] * isum;
      imn += f.m[j] * x_sums32[c0 / 32];
    }
    acc = std::fma(static_cast<float>(isc), f16_to_f32(f.d) * x_scales[s], acc);
    acc = std::fma(-static_cast<float>(imn), f16_to_f32(f.dmin) * x_scales[s], acc);
  }
  return acc;
}

// Row r of a kQ2_Kx16 matrix, exactly as interleaved16.h states every path computes it, against one
// token's activations quantized per 256 (x_sums16: the sum of each 16 of x_values).
float q2_kx16_row_dot(const WeightView& w, std::int64_t r, const float* x_scales, const std::int8_t* x_values,
                      const std::int32_t* x_sums16) {
  namespace q2k = q8x16::q2k;
  const auto* data = static_cast<const std::uint8_t*>(w.data);
  float acc = 0.0f;
  for (std::int64_t s = 0; s < w.cols / 256; ++s) {
    std::int32_t isc = 0, imn = 0;
    for (std::int64_t c0 = s * 256; c0 < s * 256 + 256; c0 += 16) {
      std::int32_t isum = 0;
      for (std::int64_t c = c0; c < c0 + 16; ++c) isum += q2k::code(data, w.cols, r, c) * x_values[c];
      const int byte = q2k::scale_byte(data, w.cols, r, c0);
      isc += (byte & 15) * isum;
      imn += (byte >> 4) * x_sums16[c0 / 16];
    }
    acc = std::fma(static_cast<float>(isc), f16_to_f32(q2k::d_bits(data, w.cols, r, s)) * x_scales[s], acc);
    acc = std::fma(-static_cast<float>(imn), f16_to_f32(q2k::d_bits(data, w.cols, r, s, false)) * x_scales[s], acc);
  }
  return acc;
}

// Row r of a kQ6_Kx16 or kQ3_Kx16 matrix, exactly as interleaved16.h states every path computes it,
// against one token's activations quantized per 256.
float sixteen_scales_row_dot(const WeightView& w, std::int64_t r, const float* x_scales, const std::int8_t* x_values) {
  namespace q3k = q8x16::q3k;
  namespace q6k = q8x16::q6k;
  const auto* data = static_cast<const std::uint8_t*>(w.data);
  const bool q3 = w.type == WeightType::kQ3_Kx16;
  const std::size_t bytes = q3 ? q3k::kSuperBlockBytes : q6k::kSuperBlockBytes;
  const int offset = q3 ? 4 : 32;
  float acc = 0.0f;
  for (std::int64_t s = 0; s < w.cols / 256; ++s) {
    std::int32_t isc = 0;
    for (std::int64_t c0 = s * 256; c0 < s * 256 + 256; c0 += 16) {
      std::int32_t isum = 0;
      for (std::int64_t c = c0; c < c0 + 16; ++c) {
        isum += ((q3 ? q3k::code(data, w.cols, r, c) : q6k::code(data, w.cols, r, c)) - offset) * x_values[c];
      }
      isc += q8x16::k::signed_scale(data, bytes, w.cols, r, c0) * isum;
    }
    acc = std::fma(static_cast<float>(isc), f16_to_f32(q8x16::k::row_f16(data, bytes, w.cols, r, s)) * x_scales[s], acc);
  }
  return acc;
}

// Row r of a kQ4_0x16, kQ5_0x16, kQ4_1x16 or kQ5_1x16 matrix, exactly as interleaved16.h states
// every path computes it (x_sums: each block's sum of x_values).
float block32x16_row_dot(const WeightView& w, std::int64_t r, const float* x_scales, const std::int8_t* x_values,
                         const std::int32_t* x_sums) {
  const auto* data = static_cast<const std::uint8_t*>(w.data);
  const q8x16::b32::Form f = q8x16::b32::form_of(w.type);
  const int offset = q8x16::b32::code_offset(f);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < w.cols / 32; ++b) {
    std::int32_t isum = 0;
    for (int c = 0; c < 32; ++c) isum += (q8x16::b32::code(data, f, w.cols, r, b * 32 + c) - offset) * x_values[b * 32 + c];
    const float scale = f16_to_f32(q8x16::b32::d_bits(data, f, w.cols, r, b)) * x_scales[b];
    acc = std::fma(static_cast<float>(isum), scale, acc);
    if (f.min) acc = std::fma(f16_to_f32(q8x16::b32::m_bits(data, f, w.cols, r, b)), x_scales[b] * static_cast<float>(x_sums[b]), acc);
  }
  return acc;
}

// Row r of a kMxfp4x16 matrix, exactly as interleaved16.h states every path computes it.
float mxfp4x16_row_dot(const WeightView& w, std::int64_t r, const float* x_scales, const std::int8_t* x_values) {
  const auto* data = static_cast<const std::uint8_t*>(w.data);
  float acc = 0.0f;
  for (std::int64_t b = 0; b < w.cols / kMxfp4BlockElems; ++b) {
    std::int32_t isum = 0;
    for (int c = 0; c < kMxfp4BlockElems; ++c) {
      isum += kMxfp4Values[q8x16::mxfp4::code(data, w.cols, r, b * kMxfp4BlockElems + c)] * x_values[b * kMxfp4BlockElems + c];
    }
    const float scale = mxfp4_half_scale(q8x16::mxfp4::scale_byte(data, w.cols, r, b)) * x_scales[b];
    acc = std::fma(static_cast<float>(isum), scale, acc);
  }
  return acc;
}

// Row r of a kF16x16 matrix against one token, exactly as interleaved16.h states every path computes
// it: four fma chains over the columns c = j (mod 4), then (p0 + p1) + (p2 + p3).
float f16x16_row_dot(const WeightView& w, std::int64_t r, const float* x) {
  const auto* data = static_cast<const std::uint8_t*>(w.data);
  float p[q8x16::f16::kChains] = {};
  for (std::int64_t c = 0; c < w.cols; ++c) {
    p[c % q8x16::f16::kChains] = std::fma(f16_to_f32(q8x16::f16::value_bits(data, w.cols, r, c)), x[c], p[c % q8x16::f16::kChains]);
  }
  return (p[0] + p[1]) + (p[2] + p[3]);
}

void matmul_rows_scalar(const WeightView& w, const float* x, const QuantizedActivations& xq, int n_tokens,
                        std::int64_t row_begin, std::int64_t row_end, float* y, std::int64_t y_stride) {
  const auto* base = static_cast<const std::uint8_t*>(w.data);
  const std::int64_t blocks = w.cols / kQ8_0BlockElems;
  if (is_interleaved(w.type)) {
    for (std::int64_t r = row_begin; r < row_end; ++r) {
      for (int t = 0; t < n_tokens; ++t) {
        if (w.type == WeightType::kF16x16) {
          y[t * y_stride + r] = f16x16_row_dot(w, r, x + static_cast<std::int64_t>(t) * w.cols);
        } else if (is_k_interleaved(w.type)) {
          const float* ks = xq.k_scales + t * (w.cols / 256);
          const std::int8_t* kv = xq.k_values + t * w.cols;
          float& out = y[t * y_stride + r];
          if (w.type == WeightType::kQ6_Kx16 || w.type == WeightType::kQ3_Kx16) {
            out = sixteen_scales_row_dot(w, r, ks, kv);
          } else if (w.type == WeightType::kQ2_Kx16) {
            out = q2_kx16_row_dot(w, r, ks, kv, xq.k_sums16 + t * (w.cols / 16));
          } else {
            out = q4_kx16_row_dot(w, r, ks, kv, xq.k_sums32 + t * blocks);
          }
        } else {
          const float* xs = xq.scales + t * blocks;
          const std::int8_t* xv = xq.values + t * w.cols;
          y[t * y_stride + r] = w.type == WeightType::kQ8_0x16    ? q8_0x16_row_dot(w, r, xs, xv)
                                : w.type == WeightType::kMxfp4x16 ? mxfp4x16_row_dot(w, r, xs, xv)
                                                                  : block32x16_row_dot(w, r, xs, xv, xq.block_sums + t * blocks);
        }
      }
    }
    return;
  }
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const std::uint8_t* row = base + r * w.row_bytes;
    for (int t = 0; t < n_tokens; ++t) {
      float acc = 0.0f;
      if (w.type == WeightType::kQ8_0) {
        acc = q8_0_row_dot(row, w.cols, xq.scales + t * blocks, xq.values + t * w.cols);
      } else if (is_quantized(w.type)) {
        with_slice_type(w.type, [&]<WeightType kType>() { acc = slice_row_dot<kType>(row, w.cols, xq, t); });
      } else {
        const float* xt = x + static_cast<std::int64_t>(t) * w.cols;
        for (std::int64_t c = 0; c < w.cols; ++c) acc += weight_at(w, row, c) * xt[c];
      }
      y[t * y_stride + r] = acc;
    }
  }
}

void dequantize_rows_scalar(const WeightView& w, std::int64_t row_begin, std::int64_t row_end, float* out) {
  const auto* base = static_cast<const std::uint8_t*>(w.data);
  if (w.type == WeightType::kF16x16) {
    for (std::int64_t r = row_begin; r < row_end; ++r) {
      float* o = out + (r - row_begin) * w.cols;
      for (std::int64_t c = 0; c < w.cols; ++c) o[c] = f16_to_f32(q8x16::f16::value_bits(base, w.cols, r, c));
    }
    return;
  }
  if (w.type == WeightType::kQ8_0x16) {  // the values of the Q8_0 original, bit for bit
    for (std::int64_t r = row_begin; r < row_end; ++r) {
      float* o = out + (r - row_begin) * w.cols;
      for (std::int64_t c = 0; c < w.cols; ++c) {
        o[c] = f16_to_f32(q8x16::scale_bits(base, w.cols, r, c / kQ8_0BlockElems)) *
               static_cast<float>(q8x16::weight(base, w.cols, r, c));
      }
    }
    return;
  }
  if (w.type == WeightType::kQ4_0x16 || w.type == WeightType::kQ5_0x16 || w.type == WeightType::kQ4_1x16 ||
      w.type == WeightType::kQ5_1x16) {  // d u - d offset or d u + m, one rounding
    const q8x16::b32::Form f = q8x16::b32::form_of(w.type);
    for (std::int64_t r = row_begin; r < row_end; ++r) {
      float* o = out + (r - row_begin) * w.cols;
      for (std::int64_t c = 0; c < w.cols; ++c) {
        const float d = f16_to_f32(q8x16::b32::d_bits(base, f, w.cols, r, c / 32));
        const float add = f.min ? f16_to_f32(q8x16::b32::m_bits(base, f, w.cols, r, c / 32)) : -(d * (f.fifth ? 16.0f : 8.0f));
        o[c] = std::fma(d, static_cast<float>(q8x16::b32::code(base, f, w.cols, r, c)), add);
      }
    }
    return;
  }
  if (w.type == WeightType::kQ2_Kx16) {  // (d sc) u - dmin m with one rounding, as the SIMD dequantizers
    for (std::int64_t r = row_begin; r < row_end; ++r) {
      float* o = out + (r - row_begin) * w.cols;
      for (std::int64_t c = 0; c < w.cols; ++c) {
        const int byte = q8x16::q2k::scale_byte(base, w.cols, r, c);
        const float scale = f16_to_f32(q8x16::q2k::d_bits(base, w.cols, r, c / 256)) * static_cast<float>(byte & 15);
        const float min = f16_to_f32(q8x16::q2k::d_bits(base, w.cols, r, c / 256, false)) * static_cast<float>(byte >> 4);
        o[c] = std::fma(scale, static_cast<float>(q8x16::q2k::code(base, w.cols, r, c)), -min);
      }
    }
    return;
  }
  if (w.type == WeightType::kQ3_Kx16 || w.type == WeightType::kQ6_Kx16) {  // (d sc) u - (d sc) offset, one rounding, as the SIMD dequantizers
    const bool q3 = w.type == WeightType::kQ3_Kx16;
    const std::size_t bytes = q3 ? q8x16::q3k::kSuperBlockBytes : q8x16::q6k::kSuperBlockBytes;
    const float offset = q3 ? 4.0f : 32.0f;
    for (std::int64_t r = row_begin; r < row_end; ++r) {
      float* o = out + (r - row_begin) * w.cols;
      for (std::int64_t c = 0; c < w.cols; ++c) {
        const float scale = f16_to_f32(q8x16::k::row_f16(base, bytes, w.cols, r, c / 256)) *
                            static_cast<float>(q8x16::k::signed_scale(base, bytes, w.cols, r, c));
        const int u = q3 ? q8x16::q3k::code(base, w.cols, r, c) : q8x16::q6k::code(base, w.cols, r, c);
        o[c] = std::fma(scale, static_cast<float>(u), -(scale * offset));
      }
    }
    return;
  }
  if (w.type == WeightType::kMxfp4x16) {  // the values of the MXFP4 original, bit for bit (v s_w is exact)
    for (std::int64_t r = row_begin; r < row_end; ++r) {
      float* o = out + (r - row_begin) * w.cols;
      for (std::int64_t c = 0; c < w.cols; ++c) {
        o[c] = static_cast<float>(kMxfp4Values[q8x16::mxfp4::code(base, w.cols, r, c)]) *
               mxfp4_half_scale(q8x16::mxfp4::scale_byte(base, w.cols, r, c / kMxfp4BlockElems));
      }
    }
    return;
  }
  if (w.type == WeightType::kQ4_Kx16 || w.type == WeightType::kQ5_Kx16) {  // d sc u - dmin m with one rounding, as the SIMD dequantizers
    const bool fifth = w.type == WeightType::kQ5_Kx16;
    for (std::int64_t r = row_begin; r < row_end; ++r) {
      float* o = out + (r - row_begin) * w.cols;
      for (std::int64_t s = 0; s < w.cols / 256; ++s) {
        const q8x16::q4k::RowFields f = q8x16::q4k::fields(base, fifth, w.cols, r, s);
        for (int c = 0; c < 256; ++c) {
          const float scale = f16_to_f32(f.d) * static_cast<float>(f.sc[c / 32]);
          const float min = f16_to_f32(f.dmin) * static_cast<float>(f.m[c / 32]);
          o[s * 256 + c] = std::fma(scale, static_cast<float>(q8x16::q4k::code(base, fifth, w.cols, r, s * 256 + c)), -min);
        }
      }
    }
    return;
  }
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const std::uint8_t* row = base + r * w.row_bytes;
    float* o = out + (r - row_begin) * w.cols;
    for (std::int64_t c = 0; c < w.cols; ++c) o[c] = weight_at(w, row, c);
  }
}

void quantize_activations_scalar(const float* x, std::int64_t n, int block, float* scales, std::int8_t* values) {
  for (std::int64_t b = 0; b < n / block; ++b) {
    const float* xb = x + b * block;
    float amax = 0.0f;
    for (int i = 0; i < block; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    scales[b] = d;
    for (int i = 0; i < block; ++i) values[b * block + i] = static_cast<std::int8_t>(std::nearbyint(xb[i] * inv_d));
  }
}

void rms_norm_scalar(const float* x, const float* weight, int n, float eps, float* out) {
  float sum_sq = 0.0f;
  for (int i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void softmax_inplace_scalar(float* x, int n) {
  if (n <= 0) return;
  float max_value = x[0];
  for (int i = 1; i < n; ++i) max_value = std::fmax(max_value, x[i]);
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  const float inv_sum = 1.0f / sum;
  for (int i = 0; i < n; ++i) x[i] *= inv_sum;
}

void silu_mul_scalar(const float* gate, const float* up, int n, float* out) {
  for (int i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add_inplace_scalar(float* y, const float* x, int n) {
  for (int i = 0; i < n; ++i) y[i] += x[i];
}

float dot_f32_scalar(const float* a, const float* b, int n) {
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

float dot_f32_f16_scalar(const float* a, const std::uint16_t* b, int n) {
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += a[i] * f16_to_f32(b[i]);
  return acc;
}

void axpy_f16_scalar(float alpha, const std::uint16_t* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += alpha * f16_to_f32(x[i]);
}

void dot_f32_f16_rows_scalar(const float* q, int n_heads, const std::uint16_t* rows, std::size_t row_stride,
                             int n_rows, int n, float scale, float* out, std::size_t out_stride) {
  for (int h = 0; h < n_heads; ++h) {
    for (int j = 0; j < n_rows; ++j) {
      out[h * out_stride + j] = dot_f32_f16_scalar(q + h * n, rows + j * row_stride, n) * scale;
    }
  }
}

void axpy_f16_rows_scalar(const float* alpha, std::size_t alpha_stride, int n_heads, const std::uint16_t* rows,
                          std::size_t row_stride, int n_rows, int n, float* y) {
  for (int h = 0; h < n_heads; ++h) {
    for (int j = 0; j < n_rows; ++j) axpy_f16_scalar(alpha[h * alpha_stride + j], rows + j * row_stride, y + h * n, n);
  }
}

void f32_to_f16_row_scalar(const float* x, std::uint16_t* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

void f16_to_f32_row_scalar(const std::uint16_t* x, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = f16_to_f32(x[i]);
}

std::uint64_t read_sum_scalar(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const std::uint64_t*>(data);
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < bytes / 8; ++i) sum += p[i];
  return sum;
}

const KernelTable kTable = {
    .path = SimdPath::kScalar,
    .matmul_rows = matmul_rows_scalar,
    .dequantize_rows = dequantize_rows_scalar,
    .quantize_activations = quantize_activations_scalar,
    .rms_norm = rms_norm_scalar,
    .softmax_inplace = softmax_inplace_scalar,
    .silu_mul = silu_mul_scalar,
    .add_inplace = add_inplace_scalar,
    .dot_f32 = dot_f32_scalar,
    .dot_f32_f16 = dot_f32_f16_scalar,
    .axpy_f16 = axpy_f16_scalar,
    .dot_f32_f16_rows = dot_f32_f16_rows_scalar,
    .axpy_f16_rows = axpy_f16_rows_scalar,
    .f32_to_f16_row = f32_to_f16_row_scalar,
    .f16_to_f32_row = f16_to_f32_row_scalar,
    .read_sum = read_sum_scalar,
};

}  // namespace

const KernelTable& scalar_kernel_table() { return kTable; }

}  // namespace kvstash::kernels
