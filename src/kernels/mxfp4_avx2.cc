// MXFP4 decode matmul on AVX2 (mxfp4.h): the same integer block sums as the scalar kernel, taken 32
// codes at a time (pshufb looks the 16 doubled E2M1 values up by nibble), and the same float
// accumulation, block after block in the scalar order without fused multiply-adds, so that the two
// paths give the same bits (mxfp4_test.cc) and a model's output does not depend on the path.
#include <immintrin.h>

#include <algorithm>

#include "kernels/mxfp4.h"

namespace kvstash::kernels {
namespace {

// The 32 codes of a block as int8 values: lanes 0-15 the low nibbles (values 0-15), lanes 16-31
// the high ones (values 16-31), the activations' order.
inline __m256i decode_block(const std::uint8_t* codes) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values));
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
  const __m128i nibble = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(bytes, nibble));
  const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble));
  return _mm256_set_m128i(hi, lo);
}

// Σ w_j x_j over 32 int8 pairs, exactly, as 8 partial int32 sums: |w| <= 12 and |x| <= 127, so
// maddubs' pair sums (at most 3048) do not saturate.
inline __m256i block_dot(__m256i w, const std::int8_t* xv) {
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xv));
  const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// The four blocks' sums of block_dot's partials, in order.
inline __m128i four_sums(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

}  // namespace

// fp-contract off (and the products in statements of their own, which compilers that ignore the
// attribute do not fuse across): a fused multiply-add would round once where the scalar kernel
// rounds twice.
// Blocks go four at a time: their integer sums in one vector, each times (activation scale × block
// scale) as the scalar kernel multiplies, then added to the row's sum one after another.
__attribute__((optimize("fp-contract=off"))) void mxfp4_matmul_rows_avx2(const WeightView& w, const QuantizedActivations& xq,
                                                                        int n_tokens, std::int64_t row_begin,
                                                                        std::int64_t row_end, float* y, std::int64_t y_stride) {
  constexpr int kTile = 4;  // tokens sharing one decode of a block
  const std::int64_t blocks = w.cols / kMxfp4BlockElems;
  const std::int64_t quads = blocks / 4 * 4;
  for (std::int64_t r = row_begin; r < row_end; ++r) {
    const auto* row = static_cast<const std::uint8_t*>(w.data) + static_cast<std::size_t>(r) * w.row_bytes;
    for (int t0 = 0; t0 < n_tokens; t0 += kTile) {
      const int nt = std::min(kTile, n_tokens - t0);
      float sum[kTile] = {};
      const std::int8_t* xv[kTile];
      const float* xs[kTile];
      for (int t = 0; t < nt; ++t) {
        const std::size_t tok = static_cast<std::size_t>(t0 + t);
        xv[t] = xq.values + tok * static_cast<std::size_t>(w.cols);
        xs[t] = xq.scales + tok * static_cast<std::size_t>(blocks);
      }
      std::int64_t i = 0;
      for (; i < quads; i += 4) {
        const std::uint8_t* b = row + i * kMxfp4BlockBytes;
        const __m256i w0 = decode_block(b + 1), w1 = decode_block(b + 18), w2 = decode_block(b + 35),
                      w3 = decode_block(b + 52);
        alignas(16) float d[4] = {mxfp4_half_scale(b[0]), mxfp4_half_scale(b[17]), mxfp4_half_scale(b[34]),
                                  mxfp4_half_scale(b[51])};
        const __m128 dv = _mm_load_ps(d);
        for (int t = 0; t < nt; ++t) {
          const std::int8_t* x = xv[t] + i * kMxfp4BlockElems;
          const __m128i isum = four_sums(block_dot(w0, x), block_dot(w1, x + 32), block_dot(w2, x + 64), block_dot(w3, x + 96));
          alignas(16) float p[4];
          _mm_store_ps(p, _mm_mul_ps(_mm_mul_ps(_mm_loadu_ps(xs[t] + i), dv), _mm_cvtepi32_ps(isum)));
          sum[t] += p[0];
          sum[t] += p[1];
          sum[t] += p[2];
          sum[t] += p[3];
        }
      }
      for (; i < blocks; ++i) {
        const std::uint8_t* b = row + i * kMxfp4BlockBytes;
        const __m256i wv = decode_block(b + 1);
        const float d = mxfp4_half_scale(b[0]);
        for (int t = 0; t < nt; ++t) {
          const __m256i q = block_dot(wv, xv[t] + i * kMxfp4BlockElems);
          const __m128i isum = four_sums(q, q, q, q);
          const float product = xs[t][i] * d * static_cast<float>(_mm_cvtsi128_si32(isum));  // rounded, then added
          sum[t] += product;
        }
      }
      for (int t = 0; t < nt; ++t) y[(t0 + t) * y_stride + r] = sum[t];
    }
  }
}

}  // namespace kvstash::kernels
