// For tests and benchmarks of kernels only: random weight matrices in each stored type, together
// with their exact f32 values (what a correct dequantizer must produce).
//
// Header-only and included only by test and benchmark executables, which are built without SIMD
// flags. Not thread-safe to share one TestWeights between writers; readers may share it.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/fp16.h"
#include "kernels/kernels.h"
#include "kernels/reference_dequant.h"

namespace kvstash::kernels {

struct TestWeights {
  std::vector<std::uint8_t> bytes;  // rows * row_bytes, the stored layout
  std::vector<float> dequantized;   // rows * cols, exact values of the stored weights
  WeightView view;                  // points into bytes
};

// Recomputes `dequantized` from `bytes` with the double-precision reference (after a test edited
// the bytes).
inline void refresh_dequantized(TestWeights& tw) {
  const std::int64_t rows = tw.view.rows, cols = tw.view.cols;
  tw.dequantized.resize(static_cast<std::size_t>(rows * cols));
  std::vector<double> row(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    reference_dequantize_row(tw.view.type, tw.bytes.data() + r * tw.view.row_bytes, cols, row.data());
    for (std::int64_t c = 0; c < cols; ++c) tw.dequantized[r * cols + c] = static_cast<float>(row[c]);
  }
}

// Byte offsets of a quantized block's f16 scale fields (d, and dmin or m where the type has one).
inline std::vector<int> half_fields(WeightType type) {
  switch (type) {
    case WeightType::kQ4_0: case WeightType::kQ5_0: case WeightType::kQ8_0: return {0};
    case WeightType::kQ4_1: case WeightType::kQ5_1: case WeightType::kQ4_K: case WeightType::kQ5_K: return {0, 2};
    case WeightType::kQ2_K: return {80, 82};
    case WeightType::kQ3_K: return {108};
    case WeightType::kQ6_K: return {208};
    default: return {};
  }
}

// Slice-form types (Q4_0 ... Q6_K) and MXFP4: every quant bit and sub-scale byte random, the f16 scale
// fields in [0.001, 0.03] (Q4_1/Q5_1 mins in [-0.5, 0.5]); `dequantized` from the double-precision
// reference, rounded to f32.
inline TestWeights make_random_blocks(WeightType type, std::int64_t rows, std::int64_t cols, std::uint32_t seed,
                                      bool exact) {
  TestWeights tw;
  const std::size_t row_bytes = row_bytes_for(type, cols);
  tw.bytes.resize(row_bytes * static_cast<std::size_t>(rows));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.03f), offset(-0.5f, 0.5f);
  for (auto& b : tw.bytes) b = static_cast<std::uint8_t>(byte(rng));
  const std::size_t block_bytes = weight_block_bytes(type);
  const bool has_m = type == WeightType::kQ4_1 || type == WeightType::kQ5_1;
  for (std::size_t at = 0; at < tw.bytes.size(); at += block_bytes) {
    // MXFP4's E8M0 scale: 2^-8 .. 2^0 (codes up to 6: weights within about ±6).
    if (type == WeightType::kMxfp4) tw.bytes[at] = static_cast<std::uint8_t>(119 + byte(rng) % 9);
    for (int field : half_fields(type)) {
      const std::uint16_t h = f32_to_f16(has_m && field == 2 ? offset(rng) : scale(rng));
      std::memcpy(&tw.bytes[at + static_cast<std::size_t>(field)], &h, 2);
    }
  }
  tw.view = WeightView{type, tw.bytes.data(), rows, cols, row_bytes};
  if (exact) refresh_dequantized(tw);
  return tw;
}

// Weights uniform in about [-1, 1] (q8_0: scales in [0.001, 0.03], all int8 values including -128).
// `exact` false skips filling `dequantized` (benchmarks of large matrices).
inline TestWeights make_test_weights(WeightType type, std::int64_t rows, std::int64_t cols, std::uint32_t seed,
                                     bool exact = true) {
  if (is_quantized(type) && type != WeightType::kQ8_0) return make_random_blocks(type, rows, cols, seed, exact);
  TestWeights tw;
  const std::size_t row_bytes = row_bytes_for(type, cols);
  tw.bytes.resize(row_bytes * static_cast<std::size_t>(rows));
  if (exact) tw.dequantized.resize(static_cast<std::size_t>(rows * cols));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.001f, 0.03f);
  std::uniform_int_distribution<int> q(-128, 127);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::uint8_t* row = tw.bytes.data() + r * row_bytes;
    float* deq = exact ? tw.dequantized.data() + r * cols : nullptr;
    for (std::int64_t c = 0; c < cols; ++c) {
      float exact_value = 0.0f;
      switch (type) {
        case WeightType::kF32:
          exact_value = value(rng);
          std::memcpy(row + c * 4, &exact_value, 4);
          break;
        case WeightType::kF16: {
          const std::uint16_t h = f32_to_f16(value(rng));
          std::memcpy(row + c * 2, &h, 2);
          exact_value = f16_to_f32(h);
          break;
        }
        case WeightType::kBF16: {
          const std::uint16_t h = f32_to_bf16(value(rng));
          std::memcpy(row + c * 2, &h, 2);
          exact_value = bf16_to_f32(h);
          break;
        }
        case WeightType::kQ8_0: {
          std::uint8_t* block = row + c / kQ8_0BlockElems * kQ8_0BlockBytes;
          if (c % kQ8_0BlockElems == 0) {
            const std::uint16_t d = f32_to_f16(scale(rng));
            std::memcpy(block, &d, 2);
          }
          std::uint16_t d;
          std::memcpy(&d, block, 2);
          const auto v = static_cast<std::int8_t>(q(rng));
          block[2 + c % kQ8_0BlockElems] = static_cast<std::uint8_t>(v);
          exact_value = f16_to_f32(d) * static_cast<float>(v);
          break;
        }
        default: break;  // slice-form types: make_random_blocks
      }
      if (deq) deq[c] = exact_value;
    }
  }
  tw.view = WeightView{type, tw.bytes.data(), rows, cols, row_bytes};
  return tw;
}

}  // namespace kvstash::kernels
