// Internal to kernels, for the SIMD translation units only (built with at least -mavx2 -mfma
// -mf16c): the slice-form types of quant_formats.h unpacked with 256-bit integer instructions.
//
// slice_values_256<kType>(block, s): the 32 codes u of slice s as bytes.
// block_groups<kType>(block): for a K super-block, the scale of every group (16 for the types with
// 16-weight groups, 8 for Q4_K/Q5_K) and the min of every 16 weights, computed once per block
// with vector instructions instead of once per slice in scalar code.
//
// Everything is in an unnamed namespace, like quant_formats.h, so each ISA's copy stays its own.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/quant_formats.h"

namespace kvstash::kernels {
namespace {

// Weights per group (one scale, one min): 16 or 32.
template <WeightType kType>
constexpr int group_elems() {
  return kType == WeightType::kQ2_K || kType == WeightType::kQ3_K || kType == WeightType::kQ6_K ? 16 : 32;
}

inline __m256i low_nibbles(__m256i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }

// Byte l of the result is 0x10 (or `value`) where bit l of the 32 bits is set.
inline __m256i expand_bits(std::uint32_t bits, std::uint8_t value) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(static_cast<char>(value)));
}

// Byte l of the result is `value` where bit `bit` of byte l of v is set.
inline __m256i select_bit(__m256i v, int bit, std::uint8_t value) {
  const __m256i mask = _mm256_set1_epi8(static_cast<char>(1u << bit));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(v, mask), mask);
  return _mm256_and_si256(set, _mm256_set1_epi8(static_cast<char>(value)));
}

inline __m256i load256(const std::uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Nibbles of 16 bytes: low nibbles are weights 0-15, high nibbles 16-31.
inline __m256i split_nibbles(const std::uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i lo = _mm_and_si128(q, _mm_set1_epi8(0x0f));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0f));
  return _mm256_set_m128i(hi, lo);
}

template <WeightType kType>
inline __m256i slice_values_256(const std::uint8_t* block, int s) {
  if constexpr (kType == WeightType::kQ4_0) {
    return split_nibbles(block + 2);
  } else if constexpr (kType == WeightType::kQ4_1) {
    return split_nibbles(block + 4);
  } else if constexpr (kType == WeightType::kQ5_0 || kType == WeightType::kQ5_1) {
    constexpr int kQh = kType == WeightType::kQ5_0 ? 2 : 4;
    return _mm256_or_si256(split_nibbles(block + kQh + 4), expand_bits(u32_at(block + kQh), 0x10));
  } else if constexpr (kType == WeightType::kQ2_K) {
    const __m256i q = load256(block + 16 + (s / 4) * 32);
    return _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * (s % 4))), _mm256_set1_epi8(3));
  } else if constexpr (kType == WeightType::kQ3_K) {
    const __m256i q = load256(block + 32 + (s / 4) * 32);
    const __m256i low = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * (s % 4))), _mm256_set1_epi8(3));
    return _mm256_or_si256(low, select_bit(load256(block), s, 4));
  } else if constexpr (kType == WeightType::kQ4_K) {
    const __m256i q = load256(block + 16 + (s / 2) * 32);
    return low_nibbles(_mm256_srl_epi16(q, _mm_cvtsi32_si128(4 * (s % 2))));
  } else if constexpr (kType == WeightType::kQ5_K) {
    const __m256i q = load256(block + 48 + (s / 2) * 32);
    const __m256i nib = low_nibbles(_mm256_srl_epi16(q, _mm_cvtsi32_si128(4 * (s % 2))));
    return _mm256_or_si256(nib, select_bit(load256(block + 16), s, 0x10));
  } else {  // kQ6_K
    const int h = s / 4, j = s % 4;
    const __m256i ql = load256(block + h * 64 + (j % 2) * 32);
    const __m256i nib = low_nibbles(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (j / 2))));
    const __m256i qh = load256(block + 128 + h * 32);
    const __m256i top = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * j)), _mm256_set1_epi8(3));
    return _mm256_or_si256(nib, _mm256_slli_epi16(top, 4));
  }
}

// 16 bytes as two vectors of 8 floats each.
inline void bytes_to_floats(__m128i bytes, bool is_signed, __m256* lo, __m256* hi) {
  const __m128i upper = _mm_unpackhi_epi64(bytes, bytes);
  *lo = _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes));
  *hi = _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(upper) : _mm256_cvtepu8_epi32(upper));
}

// A K super-block's group scales (16 groups of 16 weights, or Q4_K/Q5_K's 8 groups of 32 in
// `scales.lo`) and its mins per 16 weights, as registers: storing them and reloading them wider
// would stall on store forwarding every block.
struct BlockGroups {
  __m256 scale_lo, scale_hi;  // groups 0-7, 8-15
  __m256 min_lo, min_hi;      // weights 0-127, 128-255 in 16s
};

template <WeightType kType>
inline BlockGroups block_groups(const std::uint8_t* block) {
  BlockGroups g;
  if constexpr (kType == WeightType::kQ2_K) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block));
    const __m256 d = _mm256_set1_ps(half_at(block + 80)), dmin = _mm256_set1_ps(half_at(block + 82));
    __m256 lo, hi;
    bytes_to_floats(_mm_and_si128(packed, _mm_set1_epi8(0x0f)), false, &lo, &hi);
    g.scale_lo = _mm256_mul_ps(lo, d);
    g.scale_hi = _mm256_mul_ps(hi, d);
    bytes_to_floats(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0x0f)), false, &lo, &hi);
    g.min_lo = _mm256_mul_ps(lo, dmin);
    g.min_hi = _mm256_mul_ps(hi, dmin);
  } else if constexpr (kType == WeightType::kQ3_K || kType == WeightType::kQ6_K) {
    __m128i codes;
    float offset, d;
    if constexpr (kType == WeightType::kQ3_K) {
      // The 16 six-bit scales as bytes (quant_formats.h k3_scale, four at a time), then - 32.
      const std::uint32_t a0 = u32_at(block + 96), a1 = u32_at(block + 100), a2 = u32_at(block + 104);
      constexpr std::uint32_t kLow = 0x0f0f0f0f, kTwo = 0x03030303;
      codes = _mm_setr_epi32(static_cast<int>((a0 & kLow) | (a2 & kTwo) << 4),
                             static_cast<int>((a1 & kLow) | ((a2 >> 2) & kTwo) << 4),
                             static_cast<int>(((a0 >> 4) & kLow) | ((a2 >> 4) & kTwo) << 4),
                             static_cast<int>(((a1 >> 4) & kLow) | ((a2 >> 6) & kTwo) << 4));
      codes = _mm_sub_epi8(codes, _mm_set1_epi8(32));
      offset = 4.0f;
      d = half_at(block + 108);
    } else {
      codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 192));
      offset = 32.0f;
      d = half_at(block + 208);
    }
    __m256 lo, hi;
    bytes_to_floats(codes, true, &lo, &hi);
    const __m256 dv = _mm256_set1_ps(d), off = _mm256_set1_ps(offset);
    g.scale_lo = _mm256_mul_ps(lo, dv);
    g.scale_hi = _mm256_mul_ps(hi, dv);
    g.min_lo = _mm256_mul_ps(g.scale_lo, off);
    g.min_hi = _mm256_mul_ps(g.scale_hi, off);
  } else {  // kQ4_K, kQ5_K: eight 6-bit scales then eight 6-bit mins (quant_formats.h k4_scale_min)
    // Bytes [sc0-3 | sc4-7 | m0-3 | m4-7] from the 12 packed bytes p (quant_formats.h k4_scale_min):
    // sc0-3 = p0-3 & 63, m0-3 = p4-7 & 63, sc4-7 = (p8-11 & 15) | (p0-3 >> 6) << 4,
    // m4-7 = (p8-11 >> 4) | (p4-7 >> 6) << 4. Shuffles instead of scalar code: the scalar version
    // moved 4 words from general registers per block and cost as much as a block's dot products.
    const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 4));  // bytes 12-15: codes, unused
    const __m128i a = _mm_shuffle_epi8(p, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i nibbles = _mm_blend_epi32(a, _mm_srli_epi16(a, 4), 0x8);
    const __m128i low = _mm_and_si128(nibbles, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 15, 15, 15, 15));
    const __m128i tops = _mm_shuffle_epi8(p, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    const __m128i codes = _mm_or_si128(low, _mm_and_si128(_mm_srli_epi16(tops, 2), _mm_set1_epi8(0x30)));
    __m256 sc, mn;
    bytes_to_floats(codes, false, &sc, &mn);
    g.scale_lo = _mm256_mul_ps(sc, _mm256_set1_ps(half_at(block)));
    g.scale_hi = g.scale_lo;  // unused: 8 groups
    // Mins per 16 weights (each 32-weight group's twice), to pair with the activations' sums per 16.
    mn = _mm256_mul_ps(mn, _mm256_set1_ps(half_at(block + 2)));
    g.min_lo = _mm256_permutevar8x32_ps(mn, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
    g.min_hi = _mm256_permutevar8x32_ps(mn, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
  }
  return g;
}

// Eight consecutive 32-weight blocks (Q4_0/Q4_1/Q5_0/Q5_1) as one unit of 8 slices, in the
// BlockGroups form of a K super-block: each block's d as its group scale, its min (offset * d, or
// -m) per 16 weights. The 8 halves are gathered into one register and converted at once.
template <WeightType kType>
inline __m256 gather_halves(const std::uint8_t* first_block, int offset) {
  constexpr std::size_t kBytes = block_bytes<kType>();
  std::uint16_t h[8];
  for (int k = 0; k < 8; ++k) std::memcpy(&h[k], first_block + k * kBytes + offset, 2);
  return _mm256_cvtph_ps(_mm_setr_epi16(static_cast<short>(h[0]), static_cast<short>(h[1]), static_cast<short>(h[2]),
                                        static_cast<short>(h[3]), static_cast<short>(h[4]), static_cast<short>(h[5]),
                                        static_cast<short>(h[6]), static_cast<short>(h[7])));
}

template <WeightType kType>
inline BlockGroups block32_unit_groups(const std::uint8_t* first_block) {
  BlockGroups g;
  g.scale_lo = gather_halves<kType>(first_block, 0);
  g.scale_hi = g.scale_lo;  // unused: 8 groups
  __m256 mn;
  if constexpr (kType == WeightType::kQ4_1 || kType == WeightType::kQ5_1) {
    mn = _mm256_sub_ps(_mm256_setzero_ps(), gather_halves<kType>(first_block, 2));
  } else {
    mn = _mm256_mul_ps(g.scale_lo, _mm256_set1_ps(kType == WeightType::kQ4_0 ? 8.0f : 16.0f));
  }
  g.min_lo = _mm256_permutevar8x32_ps(mn, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
  g.min_hi = _mm256_permutevar8x32_ps(mn, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
  return g;
}

}  // namespace
}  // namespace kvstash::kernels
