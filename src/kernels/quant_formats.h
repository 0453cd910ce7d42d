// Internal to kernels: the GGUF quantized block layouts, read as "slices" of 32 weights.
//
// Every quantized type reads the same way here: a row is cut into slices of 32 consecutive weights,
// and weight l of a slice is
//
//     w = scale[l / 16] * u[l] - min[l / 16]        u an unsigned integer of 2 to 6 bits
//
// Signed formats fold their offset into `min` (Q4_0: u - 8 means min = 8 d; Q6_K: u - 32 means
// min = 32 d sc). So one integer dot product of u with int8 activations, plus the activations'
// sums per 16, serves every type; only the unpacking differs (slice_params / slice_values here,
// the SIMD unpacking in quant_unpack_avx2.h). Q8_0 keeps its own signed kernels.
//
// Block layouts (GGUF / ggml-common.h, little-endian, "half" = IEEE f16):
//   Q4_0  32 w, 18 B: half d, qs[16]           w_j = d (nib_j - 8); nib_j = qs[j] & 15, nib_{j+16} = qs[j] >> 4
//   Q4_1  32 w, 20 B: half d, half m, qs[16]   w_j = d nib_j + m
//   Q5_0  32 w, 22 B: half d, u32 qh, qs[16]   w_j = d ((nib_j | bit_j(qh) << 4) - 16)
//   Q5_1  32 w, 24 B: half d, half m, u32 qh, qs[16]   w_j = d (nib_j | bit_j(qh) << 4) + m
//   Q2_K 256 w, 84 B: scales[16], qs[64], half d, half dmin; 16 groups of 16, group g's byte holds
//        scale (low 4 bits) and min (high 4 bits); w = d sc q - dmin m, q 2 bits
//   Q3_K 256 w, 110 B: hmask[32], qs[64], scales[12] (16 packed 6-bit scales, stored + 32), half d;
//        w = d (sc - 32) (q - 4 (1 - hbit)), q 2 bits
//   Q4_K 256 w, 144 B: half d, half dmin, scales[12] (8 packed 6-bit scales and mins), qs[128];
//        8 groups of 32, w = d sc q - dmin m
//   Q5_K 256 w, 176 B: half d, half dmin, scales[12], qh[32], qs[128]; as Q4_K with a 5th bit
//   Q6_K 256 w, 210 B: ql[128], qh[64], int8 scales[16], half d; w = d sc (q - 32), q 6 bits
// Within a K super-block the 2-bit planes (Q2_K, Q3_K) hold 128 weights per 32 bytes, four slices
// per byte (bit pairs 0-1, 2-3, 4-5, 6-7); Q4_K/Q5_K pack two slices per 32 bytes (low, high
// nibble); Q6_K two per 32 bytes of ql and four per 32 bytes of qh.
//
// Everything is in an unnamed namespace: each translation unit (some built with -mavx512f) gets
// its own copy, so the linker can never hand generic code an AVX-512 build of these functions.
#pragma once

#include <cstdint>
#include <cstring>
#ifdef __F16C__
#include <immintrin.h>
#endif

#include "common/fp16.h"
#include "kernels/kernels.h"

namespace kvstash::kernels {
namespace {

inline constexpr int kSliceElems = 32;

struct SliceParams {
  float scale[2];  // for weights 0-15 and 16-31 of the slice
  float min[2];
};

inline float half_at(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
#ifdef __F16C__
  return _cvtsh_ss(h);  // the SIMD translation units: one instruction instead of the bit-level decode
#else
  return f16_to_f32(h);
#endif
}

inline std::uint32_t u32_at(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Q4_K / Q5_K: the 6-bit scale and min of group g (0-7) from their 12 packed bytes. Groups 0-3
// keep theirs in the low 6 bits of bytes g and g + 4; groups 4-7 take 4 bits from byte g + 4 and
// their top 2 bits from the spare top bits of bytes g - 4 and g.
inline void k4_scale_min(const std::uint8_t* packed, int g, int* sc, int* m) {
  if (g < 4) {
    *sc = packed[g] & 63;
    *m = packed[g + 4] & 63;
  } else {
    *sc = (packed[g + 4] & 15) | ((packed[g - 4] >> 6) << 4);
    *m = (packed[g + 4] >> 4) | ((packed[g] >> 6) << 4);
  }
}

// Q3_K: the signed scale of group g (0-15): low 4 bits in byte g (g < 8) or the high nibble of
// byte g - 8, top 2 bits in byte 8 + g % 4 at bit 2 (g / 4); stored with +32.
inline int k3_scale(const std::uint8_t* packed, int g) {
  const int low = g < 8 ? packed[g] & 15 : packed[g - 8] >> 4;
  const int high = (packed[8 + g % 4] >> (2 * (g / 4))) & 3;
  return (low | high << 4) - 32;
}

template <WeightType kType>
inline SliceParams slice_params(const std::uint8_t* block, int s) {
  SliceParams p{};
  if constexpr (kType == WeightType::kQ4_0 || kType == WeightType::kQ5_0) {
    const float d = half_at(block);
    const float offset = kType == WeightType::kQ4_0 ? 8.0f : 16.0f;
    p = {{d, d}, {offset * d, offset * d}};
  } else if constexpr (kType == WeightType::kQ4_1 || kType == WeightType::kQ5_1) {
    const float d = half_at(block), m = half_at(block + 2);
    p = {{d, d}, {-m, -m}};
  } else if constexpr (kType == WeightType::kQ2_K) {
    const float d = half_at(block + 80), dmin = half_at(block + 82);
    const int g = (s / 4) * 8 + (s % 4) * 2;
    for (int h = 0; h < 2; ++h) {
      p.scale[h] = d * static_cast<float>(block[g + h] & 15);
      p.min[h] = dmin * static_cast<float>(block[g + h] >> 4);
    }
  } else if constexpr (kType == WeightType::kQ3_K) {
    const float d = half_at(block + 108);
    const int g = (s / 4) * 8 + (s % 4) * 2;
    for (int h = 0; h < 2; ++h) {
      p.scale[h] = d * static_cast<float>(k3_scale(block + 96, g + h));
      p.min[h] = 4.0f * p.scale[h];
    }
  } else if constexpr (kType == WeightType::kQ4_K || kType == WeightType::kQ5_K) {
    const float d = half_at(block), dmin = half_at(block + 2);
    int sc, m;
    k4_scale_min(block + 4, s, &sc, &m);
    const float scale = d * static_cast<float>(sc), min = dmin * static_cast<float>(m);
    p = {{scale, scale}, {min, min}};
  } else if constexpr (kType == WeightType::kQ6_K) {
    const float d = half_at(block + 208);
    const auto* scales = reinterpret_cast<const std::int8_t*>(block + 192);
    const int g = (s / 4) * 8 + (s % 4) * 2;
    for (int h = 0; h < 2; ++h) {
      p.scale[h] = d * static_cast<float>(scales[g + h]);
      p.min[h] = 32.0f * p.scale[h];
    }
  }
  return p;
}

// The unsigned integer u of weight l (0-31) of slice s.
template <WeightType kType>
inline int slice_value(const std::uint8_t* block, int s, int l) {
  if constexpr (kType == WeightType::kQ4_0 || kType == WeightType::kQ4_1) {
    const std::uint8_t* qs = block + (kType == WeightType::kQ4_0 ? 2 : 4);
    return l < 16 ? qs[l] & 15 : qs[l - 16] >> 4;
  } else if constexpr (kType == WeightType::kQ5_0 || kType == WeightType::kQ5_1) {
    const int qh_at = kType == WeightType::kQ5_0 ? 2 : 4;
    const std::uint8_t* qs = block + qh_at + 4;
    const int nib = l < 16 ? qs[l] & 15 : qs[l - 16] >> 4;
    return nib | static_cast<int>((u32_at(block + qh_at) >> l) & 1) << 4;
  } else if constexpr (kType == WeightType::kQ2_K) {
    return (block[16 + (s / 4) * 32 + l] >> (2 * (s % 4))) & 3;
  } else if constexpr (kType == WeightType::kQ3_K) {
    const int low = (block[32 + (s / 4) * 32 + l] >> (2 * (s % 4))) & 3;
    const int high = (block[l] >> s) & 1;  // hmask bit s (0-7) of byte l
    return low | high << 2;
  } else if constexpr (kType == WeightType::kQ4_K) {
    return (block[16 + (s / 2) * 32 + l] >> (4 * (s % 2))) & 15;
  } else if constexpr (kType == WeightType::kQ5_K) {
    const int nib = (block[48 + (s / 2) * 32 + l] >> (4 * (s % 2))) & 15;
    return nib | ((block[16 + l] >> s) & 1) << 4;
  } else if constexpr (kType == WeightType::kQ6_K) {
    const int h = s / 4, j = s % 4;
    const int nib = (block[h * 64 + (j % 2) * 32 + l] >> (4 * (j / 2))) & 15;
    const int top = (block[128 + h * 32 + l] >> (2 * j)) & 3;
    return nib | top << 4;
  }
  return 0;
}

template <WeightType kType>
constexpr int slices_per_block() {
  return kType == WeightType::kQ4_0 || kType == WeightType::kQ4_1 || kType == WeightType::kQ5_0 ||
                 kType == WeightType::kQ5_1
             ? 1
             : 8;
}

template <WeightType kType>
constexpr std::size_t block_bytes() {
  switch (kType) {
    case WeightType::kQ4_0: return 18;
    case WeightType::kQ4_1: return 20;
    case WeightType::kQ5_0: return 22;
    case WeightType::kQ5_1: return 24;
    case WeightType::kQ2_K: return 84;
    case WeightType::kQ3_K: return 110;
    case WeightType::kQ4_K: return 144;
    case WeightType::kQ5_K: return 176;
    case WeightType::kQ6_K: return 210;
    default: return 0;
  }
}

// The block holding slice `slice` (counted from the row start) and the slice's index within it.
template <WeightType kType>
inline const std::uint8_t* slice_block(const std::uint8_t* row, std::int64_t slice, int* s) {
  constexpr int kPer = slices_per_block<kType>();
  *s = static_cast<int>(slice % kPer);
  return row + (slice / kPer) * block_bytes<kType>();
}

// Calls f.template operator()<kType>() for a slice-form quantized type; returns false otherwise
// (float types and Q8_0).
template <class F>
inline bool with_slice_type(WeightType type, F&& f) {
  switch (type) {
    case WeightType::kQ4_0: f.template operator()<WeightType::kQ4_0>(); return true;
    case WeightType::kQ4_1: f.template operator()<WeightType::kQ4_1>(); return true;
    case WeightType::kQ5_0: f.template operator()<WeightType::kQ5_0>(); return true;
    case WeightType::kQ5_1: f.template operator()<WeightType::kQ5_1>(); return true;
    case WeightType::kQ2_K: f.template operator()<WeightType::kQ2_K>(); return true;
    case WeightType::kQ3_K: f.template operator()<WeightType::kQ3_K>(); return true;
    case WeightType::kQ4_K: f.template operator()<WeightType::kQ4_K>(); return true;
    case WeightType::kQ5_K: f.template operator()<WeightType::kQ5_K>(); return true;
    case WeightType::kQ6_K: f.template operator()<WeightType::kQ6_K>(); return true;
    default: return false;
  }
}

}  // namespace
}  // namespace kvstash::kernels
