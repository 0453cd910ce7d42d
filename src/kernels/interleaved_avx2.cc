// AVX2 + FMA + F16C kernels for the interleaved layouts (interleaved16.h) that AVX2 multiplies
// faster than the GGUF layouts without VNNI: kQ8_0x16, kQ4_0x16, kQ5_0x16, kQ4_1x16, kQ5_1x16 and
// kQ4_Kx16 (kernels.cc, avx2_reads_interleaved).
//
// A 16-row group's 64-byte chunk (16 rows x 4 weights, one row per 32-bit lane) is two ymm halves:
// rows 0-7 and rows 8-15. Each half runs as its own 8-row tile against up to 2 tokens (16 ymm
// registers). The VNNI step becomes maddubs (unsigned codes x signed activations, pairs summed in
// int16) and one madd per sum (against ones, or Q4_K's scales): the codes are at most 31 and the
// activations at most 127 in magnitude, so a pair is at most 7874 (5-bit) or 3810 (4-bit), and two
// or eight of them add in int16 without saturating (Q8_0: see q8_half). So every integer
// sum is exact, and the float arithmetic per row is the scalar statement's (kernels_scalar.cc), in
// the same order: the results equal the scalar path's and the AVX-512 path's bit for bit
// (interleaved16_test).
//
// Left on the GGUF layout at this level: Q5_K, whose fifth bits cost AVX2 five operations per 32
// codes to spread (no mask registers) and which read no faster interleaved (9.5-10.1 GB/s against
// 10.0 for its row kernel: kernels_bench --types q5_K,q5_Kx16 --shapes 8192x2048 --threads 1,
// KVSTASH_SIMD=avx2, Sapphire Rapids); Q6_K, likewise: a kernel of this form (maddubs per 6-bit slice, two steps in
// int16, the group scales by multiply-add) computed at 16.8 GB/s from cache against the row kernel's
// 16.1 and read 8.4-9.5 GB/s from memory against its 9.7-10.2 (8192x2048, 128256x2048); Q3_K, Q2_K
// and F16 (not written for AVX2).
#include <immintrin.h>

#include <cstring>

#include "kernels/interleaved16.h"
#include "kernels/matmul_tiles.h"
#include "kernels/simd_dispatch.h"

namespace kvstash::kernels::avx2 {
namespace {

// 16 in each byte of 32 whose bit of `bits` is set (bit i for byte i).
__attribute__((always_inline)) inline __m256i sixteen_where(std::uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                             _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                                              2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}

// The 32 bits of a stored 64-bit fifth-bit mask that cover half h (rows 8h..8h+7) of its chunk.
__attribute__((always_inline)) inline std::uint32_t mask_half(const std::uint8_t* at, int h) {
  std::uint32_t bits;
  std::memcpy(&bits, at + 4 * h, 4);
  return bits;
}

__attribute__((always_inline)) inline __m256i broadcast4(const std::int8_t* x) {
  std::int32_t v;
  std::memcpy(&v, x, 4);
  return _mm256_set1_epi32(v);
}

__attribute__((always_inline)) inline __m256 load_f16x8(const std::uint8_t* at) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at)));
}

// Prefetch: one token reads a unit or super-block while the next kilobyte comes in, into L1 on every
// core but AMD's (as the AVX-512 tiles of these types but Q8_0, which read the same from L1 or L2
// there; see matmul_avx512.cc), Q8_0 included (not compared with L2 here); several tokens spend more
// arithmetic per byte, so 16 KiB ahead into L2 (as the AVX-512 tiles). One token into L1 against
// L2, GB/s, 8192x2048, one thread, Sapphire Rapids with KVSTASH_SIMD=avx2: Q4_0 12.4-12.8 ->
// 12.8-13.7, Q5_0 10.1 -> 10.8-11.0, Q4_K 11.8-11.9 -> 12.0-12.2; 2 KiB ahead no better.
inline std::size_t prefetch_ahead(int n_tokens) { return n_tokens > 1 ? std::size_t{16} << 10 : std::size_t{1} << 10; }

inline void prefetch_unit(const std::uint8_t* at, std::size_t bytes, int n_tokens) {
  static const bool off_amd = !amd_core();
  prefetch_span(at, bytes, n_tokens == 1 && off_amd);
}

// kQ4_0x16, kQ5_0x16, kQ4_1x16, kQ5_1x16: one group of 16 rows, half h, against T <= 2 tokens.
// Per block and token: isum = sum(u x) - offset sum(x), then acc = fma(isum, d dx, acc) and (Q4_1,
// Q5_1) acc = fma(m, dx sum(x), acc), as block32x16_row_dot states.
template <WeightType kType, int T>
void block32_half(const std::uint8_t* group, std::int64_t cols, int h, const float* x_scales, const std::int8_t* x_values,
                  const std::int32_t* x_sums, float* y, std::int64_t y_stride, const std::uint8_t* prefetch_at) {
  namespace b32 = q8x16::b32;
  constexpr b32::Form kForm = b32::form_of(kType);
  constexpr std::size_t kUnit = b32::unit_bytes(kForm), kCodes = b32::codes_at(kForm), kMasks = b32::masks_at(kForm);
  constexpr int kOffset = b32::code_offset(kForm);
  const std::int64_t blocks = cols / kQ8_0BlockElems;
  const __m256i low4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (std::int64_t un = 0; un < blocks / 2; ++un) {
    const std::uint8_t* unit = group + un * kUnit;
    if (prefetch_at != nullptr) prefetch_unit(prefetch_at + un * kUnit, kUnit, T);
    for (int j = 0; j < 2; ++j) {
      const std::int64_t b = 2 * un + j;
      // Four chunks of codes: low nibbles are weights 4k..4k+3, high ones 16+4k..16+4k+3.
      __m256i sum16[T], sum32[T];
      for (int t = 0; t < T; ++t) sum16[t] = sum32[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(unit + kCodes + 256 * j + 64 * k + 32 * h));
        __m256i lo = _mm256_and_si256(c, low4), hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), low4);
        if constexpr (kForm.fifth) {
          lo = _mm256_or_si256(lo, sixteen_where(mask_half(unit + kMasks + 64 * j + 8 * k, h)));
          hi = _mm256_or_si256(hi, sixteen_where(mask_half(unit + kMasks + 64 * j + 8 * (k + 4), h)));
        }
        for (int t = 0; t < T; ++t) {
          const std::int8_t* xb = x_values + t * cols + b * kQ8_0BlockElems;
          const __m256i pair = _mm256_add_epi16(_mm256_maddubs_epi16(lo, broadcast4(xb + 4 * k)),
                                                _mm256_maddubs_epi16(hi, broadcast4(xb + 16 + 4 * k)));
          // 5-bit codes: a pair of chunks reaches 15748, so widen each; 4-bit: all four fit int16.
          if constexpr (kForm.fifth) {
            sum32[t] = _mm256_add_epi32(sum32[t], _mm256_madd_epi16(pair, ones));
          } else {
            sum16[t] = _mm256_add_epi16(sum16[t], pair);
          }
        }
      }
      const __m256 d = load_f16x8(unit + 32 * j + 16 * h);
      for (int t = 0; t < T; ++t) {
        const std::int32_t sum = x_sums[t * blocks + b];
        const __m256i dot = kForm.fifth ? sum32[t] : _mm256_madd_epi16(sum16[t], ones);
        const __m256i isum = _mm256_sub_epi32(dot, _mm256_set1_epi32(kOffset * sum));
        const float dx = x_scales[t * blocks + b];
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, _mm256_set1_ps(dx)), acc[t]);
        if constexpr (kForm.min) {
          const __m256 m = load_f16x8(unit + b32::kMins + 32 * j + 16 * h);
          acc[t] = _mm256_fmadd_ps(m, _mm256_set1_ps(dx * static_cast<float>(sum)), acc[t]);
        }
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * y_stride + 8 * h, acc[t]);
}

// kQ8_0x16: one group of 16 rows, half h, against T <= 2 tokens. The codes are stored + 128; as
// signed weights w (the stored byte xor 0x80), maddubs takes |w| and the activation with w's sign,
// so a pair is at most 128 x 127 x 2 = 32512 and each step widens to int32 at once. Per block and
// token: isum = sum(w x), acc = fma(isum, d dx, acc), as q8_0x16_row_dot states.
template <int T>
void q8_half(const std::uint8_t* group, std::int64_t cols, int h, const float* x_scales, const std::int8_t* x_values,
             float* y, std::int64_t y_stride, const std::uint8_t* prefetch_at) {
  const std::int64_t blocks = cols / kQ8_0BlockElems;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80)), ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (std::int64_t un = 0; un < blocks / 2; ++un) {
    const std::uint8_t* unit = group + un * q8x16::kUnitBytes;
    if (prefetch_at != nullptr) prefetch_unit(prefetch_at + un * q8x16::kUnitBytes, q8x16::kUnitBytes, T);
    for (int j = 0; j < 2; ++j) {
      const std::int64_t b = 2 * un + j;
      const std::uint8_t* wb = unit + q8x16::kScalesBytes + j * q8x16::kBlockWeightBytes;
      __m256i sum[T];
      for (int t = 0; t < T; ++t) sum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m256i w = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 64 * k + 32 * h)), flip);
        const __m256i magnitude = _mm256_abs_epi8(w);  // -128 becomes 128, read unsigned
        for (int t = 0; t < T; ++t) {
          const __m256i x = _mm256_sign_epi8(broadcast4(x_values + t * cols + b * kQ8_0BlockElems + 4 * k), w);
          sum[t] = _mm256_add_epi32(sum[t], _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, x), ones));
        }
      }
      const __m256 d = load_f16x8(unit + 32 * j + 16 * h);
      for (int t = 0; t < T; ++t) {
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[t]), _mm256_mul_ps(d, _mm256_set1_ps(x_scales[t * blocks + b])), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * y_stride + 8 * h, acc[t]);
}

// kQ4_Kx16: one group of 16 rows, half h, against T <= 2 tokens' activations quantized per 256. Per super-block and token: isc = sum over sub-blocks of scale x sum(u x) in int32, imn =
// the mins against the activations' sums per 32; acc = fma(isc, d dx, acc), acc = fma(-imn, dmin
// dx, acc), as q4_kx16_row_dot states. (The AVX-512 tile keeps Q4_K's high nibbles in place, 16
// times the sum, and scales by 1/16: the same float.)
template <int T>
void q4k_half(const std::uint8_t* group, std::int64_t cols, int h, const float* x_scales, const std::int8_t* x_values,
              const std::int16_t* x_sums32, float* y, std::int64_t y_stride, const std::uint8_t* prefetch_at) {
  namespace q4k = q8x16::q4k;
  constexpr std::size_t kSuperBlockBytes = q4k::super_block_bytes(false);
  const std::int64_t supers = cols / 256;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (std::int64_t s = 0; s < supers; ++s) {
    const std::uint8_t* sb = group + s * kSuperBlockBytes;
    __m256i isc[T];
    for (int t = 0; t < T; ++t) isc[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int p = 0; p < 4; ++p) {
      // The first half's pass brings the pair's quarter of the super-block ahead into L2.
      if (prefetch_at != nullptr && h == 0) prefetch_unit(prefetch_at + s * kSuperBlockBytes + p * (kSuperBlockBytes / 4), kSuperBlockBytes / 4, T);
      __m256i lo_sum[T], hi_sum[T];
      for (int t = 0; t < T; ++t) lo_sum[t] = hi_sum[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + q4k::codes_at(false, p, k) + 32 * h));
        const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        for (int t = 0; t < T; ++t) {
          // Eight chunks of one sub-block add in int16 (at most 30480).
          const std::int8_t* xb = x_values + t * cols + s * 256 + p * 64;
          lo_sum[t] = _mm256_add_epi16(lo_sum[t], _mm256_maddubs_epi16(lo, broadcast4(xb + 4 * k)));
          hi_sum[t] = _mm256_add_epi16(hi_sum[t], _mm256_maddubs_epi16(hi, broadcast4(xb + 32 + 4 * k)));
        }
      }
      // Each row's 6-bit scale in both int16 halves of its lane: one multiply-add of the int16 sums
      // gives scale x dot in int32 (at most 63 x 60960).
      const auto scales = [&](int j) {
        const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sb + q4k::kScales + 16 * j + 8 * h)));
        return _mm256_or_si256(sc, _mm256_slli_epi32(sc, 16));
      };
      const __m256i sc_lo = scales(2 * p), sc_hi = scales(2 * p + 1);
      for (int t = 0; t < T; ++t) {
        isc[t] = _mm256_add_epi32(isc[t], _mm256_add_epi32(_mm256_madd_epi16(lo_sum[t], sc_lo), _mm256_madd_epi16(hi_sum[t], sc_hi)));
      }
    }
    const __m256 d = load_f16x8(sb + 16 * h), dmin = load_f16x8(sb + 32 + 16 * h);
    for (int t = 0; t < T; ++t) {
      const std::int16_t* xs = x_sums32 + t * (cols / 32) + s * 8;
      __m256i imn = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) {
        // Row l's two mins (sub-blocks 2p, 2p + 1) are adjacent: one multiply-add of pairs.
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + q4k::kMins + 32 * p + 16 * h)));
        std::int32_t two;
        std::memcpy(&two, xs + 2 * p, 4);
        imn = _mm256_add_epi32(imn, _mm256_madd_epi16(mins, _mm256_set1_epi32(two)));
      }
      const __m256 dx = _mm256_set1_ps(x_scales[t * supers + s]);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isc[t]), _mm256_mul_ps(d, dx), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imn), _mm256_mul_ps(dmin, dx), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * y_stride + 8 * h, acc[t]);
}

template <WeightType kType>
void interleaved_rows_of(const WeightView& w, const QuantizedActivations& xq, int n_tokens, std::int64_t row_begin,
                         std::int64_t row_end, float* y, std::int64_t y_stride) {
  constexpr bool kK = kType == WeightType::kQ4_Kx16;
  constexpr bool kQ8 = kType == WeightType::kQ8_0x16;
  const auto* base = static_cast<const std::uint8_t*>(w.data);
  std::size_t group_bytes = 0;
  if constexpr (kK) {
    group_bytes = q8x16::q4k::group_bytes(false, w.cols);
  } else if constexpr (kQ8) {
    group_bytes = q8x16::group_bytes(w.cols);
  } else {
    group_bytes = q8x16::b32::group_bytes(q8x16::b32::form_of(kType), w.cols);
  }
  const std::int64_t blocks = w.cols / kQ8_0BlockElems;
  for (std::int64_t g = row_begin / q8x16::kGroupRows; g < row_end / q8x16::kGroupRows; ++g) {
    const std::uint8_t* group = base + static_cast<std::size_t>(g) * group_bytes;
    for (int t0 = 0; t0 < n_tokens; t0 += 2) {
      float* yt = y + t0 * y_stride + g * q8x16::kGroupRows;
      const std::uint8_t* ahead = t0 == 0 ? group + prefetch_ahead(n_tokens) : nullptr;
      auto run = [&]<int T>() {
        for (int h = 0; h < 2; ++h) {
          if constexpr (kQ8) {
            q8_half<T>(group, w.cols, h, xq.scales + t0 * blocks, xq.values + t0 * w.cols, yt, y_stride,
                       h == 0 ? ahead : nullptr);
          } else if constexpr (kK) {
            q4k_half<T>(group, w.cols, h, xq.k_scales + t0 * (w.cols / 256), xq.k_values + t0 * w.cols,
                                 xq.k_sums32 + t0 * blocks, yt, y_stride, h == 0 ? ahead : nullptr);
          } else {
            block32_half<kType, T>(group, w.cols, h, xq.scales + t0 * blocks, xq.values + t0 * w.cols,
                                   xq.block_sums + t0 * blocks, yt, y_stride, h == 0 ? ahead : nullptr);
          }
        }
      };
      if (n_tokens - t0 >= 2) {
        run.template operator()<2>();
      } else {
        run.template operator()<1>();
      }
    }
  }
}

}  // namespace

bool interleaved_rows(const WeightView& w, const QuantizedActivations& xq, int n_tokens, std::int64_t row_begin,
                      std::int64_t row_end, float* y, std::int64_t y_stride) {
  switch (w.type) {
    case WeightType::kQ8_0x16: interleaved_rows_of<WeightType::kQ8_0x16>(w, xq, n_tokens, row_begin, row_end, y, y_stride); return true;
    case WeightType::kQ4_0x16: interleaved_rows_of<WeightType::kQ4_0x16>(w, xq, n_tokens, row_begin, row_end, y, y_stride); return true;
    case WeightType::kQ5_0x16: interleaved_rows_of<WeightType::kQ5_0x16>(w, xq, n_tokens, row_begin, row_end, y, y_stride); return true;
    case WeightType::kQ4_1x16: interleaved_rows_of<WeightType::kQ4_1x16>(w, xq, n_tokens, row_begin, row_end, y, y_stride); return true;
    case WeightType::kQ5_1x16: interleaved_rows_of<WeightType::kQ5_1x16>(w, xq, n_tokens, row_begin, row_end, y, y_stride); return true;
    case WeightType::kQ4_Kx16: interleaved_rows_of<WeightType::kQ4_Kx16>(w, xq, n_tokens, row_begin, row_end, y, y_stride); return true;
    default: return false;
  }
}

}  // namespace kvstash::kernels::avx2
