// Scalar encoders for every quantized type (kernels::quantize_row, quantize_q8_0) and the Q8_0
// decoder. quant_formats.h describes the layouts written here.
#include "kernels/quantize.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "common/fp16.h"
#include "kernels/kernels.h"
#include "kernels/mxfp4.h"

namespace kvstash::kernels {
namespace {

constexpr float kQ8Max = 127.0f;  // the largest magnitude an int8 quant takes, so -127..127 is symmetric

int round_clamp(float v, int lo, int hi) {
  return std::clamp(static_cast<int>(std::nearbyint(v)), lo, hi);
}

void put_half(std::uint8_t* p, float v, float* stored) {
  const std::uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
  *stored = f16_to_f32(h);
}

// The element of largest magnitude, with its sign.
float signed_absmax(const float* x, int n) {
  float best = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(best)) best = x[i];
  }
  return best;
}

// Q4_0 / Q5_0: d = extreme / -(2^(bits-1)), so the extreme maps to the lowest code.
void encode_symmetric_32(const float* x, int bits, std::uint8_t* b) {
  const int half_range = 1 << (bits - 1);
  float d;
  put_half(b, signed_absmax(x, 32) / -static_cast<float>(half_range), &d);
  const float inv = d != 0.0f ? 1.0f / d : 0.0f;
  std::uint32_t qh = 0;
  std::uint8_t* qs = b + (bits == 5 ? 6 : 2);
  std::memset(qs, 0, 16);
  for (int j = 0; j < 32; ++j) {
    const int u = round_clamp(x[j] * inv, -half_range, half_range - 1) + half_range;
    qs[j % 16] |= static_cast<std::uint8_t>((u & 15) << (j < 16 ? 0 : 4));
    qh |= static_cast<std::uint32_t>(u >> 4) << j;
  }
  if (bits == 5) std::memcpy(b + 2, &qh, 4);
}

// Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), m = min.
void encode_affine_32(const float* x, int bits, std::uint8_t* b) {
  const int top = (1 << bits) - 1;
  const float lo = *std::min_element(x, x + 32), hi = *std::max_element(x, x + 32);
  float d, m;
  put_half(b, (hi - lo) / static_cast<float>(top), &d);
  put_half(b + 2, lo, &m);
  const float inv = d != 0.0f ? 1.0f / d : 0.0f;
  std::uint32_t qh = 0;
  std::uint8_t* qs = b + (bits == 5 ? 8 : 4);
  std::memset(qs, 0, 16);
  for (int j = 0; j < 32; ++j) {
    const int u = round_clamp((x[j] - m) * inv, 0, top);
    qs[j % 16] |= static_cast<std::uint8_t>((u & 15) << (j < 16 ? 0 : 4));
    qh |= static_cast<std::uint32_t>(u >> 4) << j;
  }
  if (bits == 5) std::memcpy(b + 4, &qh, 4);
}

// K types with a scale and a min per group: w = d sc u - dmin m. Returns the codes u (256) and the
// group scales and mins as stored (sc, m in [0, scale_top]).
void encode_scale_min_groups(const float* x, int group, int u_top, int scale_top, float d_in_out[2],
                             int* sc, int* mn, int* u) {
  const int groups = 256 / group;
  float scale[16], minus_min[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int g = 0; g < groups; ++g) {
    const float* xg = x + g * group;
    const float lo = std::min(0.0f, *std::min_element(xg, xg + group));
    const float hi = *std::max_element(xg, xg + group);
    scale[g] = (hi - lo) / static_cast<float>(u_top);
    minus_min[g] = -lo;
    max_scale = std::max(max_scale, scale[g]);
    max_min = std::max(max_min, minus_min[g]);
  }
  const float d = max_scale / static_cast<float>(scale_top), dmin = max_min / static_cast<float>(scale_top);
  d_in_out[0] = f16_to_f32(f32_to_f16(d));
  d_in_out[1] = f16_to_f32(f32_to_f16(dmin));
  for (int g = 0; g < groups; ++g) {
    sc[g] = d_in_out[0] > 0.0f ? round_clamp(scale[g] / d_in_out[0], 0, scale_top) : 0;
    mn[g] = d_in_out[1] > 0.0f ? round_clamp(minus_min[g] / d_in_out[1], 0, scale_top) : 0;
    const float eff = d_in_out[0] * static_cast<float>(sc[g]), eff_min = d_in_out[1] * static_cast<float>(mn[g]);
    const float inv = eff != 0.0f ? 1.0f / eff : 0.0f;
    for (int l = 0; l < group; ++l) u[g * group + l] = round_clamp((x[g * group + l] + eff_min) * inv, 0, u_top);
  }
}

// K types with one signed scale per group of 16: w = d sc (u - offset).
void encode_signed_groups(const float* x, int offset, int scale_top, float* d_out, int* sc, int* u) {
  float scale[16], max_abs = 0.0f;
  for (int g = 0; g < 16; ++g) {
    scale[g] = signed_absmax(x + g * 16, 16) / -static_cast<float>(offset);
    max_abs = std::max(max_abs, std::fabs(scale[g]));
  }
  *d_out = f16_to_f32(f32_to_f16(max_abs / static_cast<float>(scale_top)));
  for (int g = 0; g < 16; ++g) {
    sc[g] = *d_out > 0.0f ? round_clamp(scale[g] / *d_out, -scale_top, scale_top) : 0;
    const float eff = *d_out * static_cast<float>(sc[g]);
    const float inv = eff != 0.0f ? 1.0f / eff : 0.0f;
    for (int l = 0; l < 16; ++l) u[g * 16 + l] = round_clamp(x[g * 16 + l] * inv, -offset, offset - 1) + offset;
  }
}

void store_half(std::uint8_t* p, float v) {
  const std::uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

void encode_q2_k(const float* x, std::uint8_t* b) {
  float d[2];
  int sc[16], mn[16], u[256];
  encode_scale_min_groups(x, 16, 3, 15, d, sc, mn, u);
  std::memset(b, 0, 84);
  for (int g = 0; g < 16; ++g) b[g] = static_cast<std::uint8_t>(sc[g] | mn[g] << 4);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e / 32) % 4, l = e % 32;
    b[16 + h * 32 + l] |= static_cast<std::uint8_t>(u[e] << (2 * j));
  }
  store_half(b + 80, d[0]);
  store_half(b + 82, d[1]);
}

void encode_q3_k(const float* x, std::uint8_t* b) {
  float d;
  int sc[16], u[256];
  encode_signed_groups(x, 4, 31, &d, sc, u);
  std::memset(b, 0, 110);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e / 32) % 4, l = e % 32;
    b[32 + h * 32 + l] |= static_cast<std::uint8_t>((u[e] & 3) << (2 * j));
    b[l] |= static_cast<std::uint8_t>((u[e] >> 2) << (h * 4 + j));
  }
  std::uint8_t* packed = b + 96;
  for (int g = 0; g < 16; ++g) {
    const int stored = sc[g] + 32;
    packed[g % 8] |= static_cast<std::uint8_t>((stored & 15) << (g < 8 ? 0 : 4));
    packed[8 + g % 4] |= static_cast<std::uint8_t>((stored >> 4) << (2 * (g / 4)));
  }
  store_half(b + 108, d);
}

// Q4_K / Q5_K's 12 bytes for eight 6-bit scales and mins.
void pack_k4_scales(const int* sc, const int* mn, std::uint8_t* p) {
  for (int g = 0; g < 4; ++g) {
    p[g] = static_cast<std::uint8_t>(sc[g] | (sc[g + 4] >> 4) << 6);
    p[g + 4] = static_cast<std::uint8_t>(mn[g] | (mn[g + 4] >> 4) << 6);
    p[g + 8] = static_cast<std::uint8_t>((sc[g + 4] & 15) | (mn[g + 4] & 15) << 4);
  }
}

void encode_q4_k_or_q5_k(const float* x, bool five_bits, std::uint8_t* b) {
  float d[2];
  int sc[8], mn[8], u[256];
  encode_scale_min_groups(x, 32, five_bits ? 31 : 15, 63, d, sc, mn, u);
  std::memset(b, 0, five_bits ? 176 : 144);
  store_half(b, d[0]);
  store_half(b + 2, d[1]);
  pack_k4_scales(sc, mn, b + 4);
  std::uint8_t* qs = b + (five_bits ? 48 : 16);
  for (int e = 0; e < 256; ++e) {
    const int g = e / 32, l = e % 32;
    qs[(g / 2) * 32 + l] |= static_cast<std::uint8_t>((u[e] & 15) << (4 * (g % 2)));
    if (five_bits) b[16 + l] |= static_cast<std::uint8_t>((u[e] >> 4) << g);
  }
}

void encode_q6_k(const float* x, std::uint8_t* b) {
  float d;
  int sc[16], u[256];
  encode_signed_groups(x, 32, 127, &d, sc, u);
  std::memset(b, 0, 210);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e / 32) % 4, l = e % 32;
    b[h * 64 + (j % 2) * 32 + l] |= static_cast<std::uint8_t>((u[e] & 15) << (4 * (j / 2)));
    b[128 + h * 32 + l] |= static_cast<std::uint8_t>((u[e] >> 4) << (2 * j));
  }
  for (int g = 0; g < 16; ++g) b[192 + g] = static_cast<std::uint8_t>(static_cast<std::int8_t>(sc[g]));
  store_half(b + 208, d);
}

}  // namespace

void quantize_q8_0(const float* x, std::int64_t n, void* out) {
  auto* dst = static_cast<std::uint8_t*>(out);
  for (std::int64_t b = 0; b < n / kQ8_0BlockElems; ++b, x += kQ8_0BlockElems, dst += kQ8_0BlockBytes) {
    float amax = 0.0f;
    for (int i = 0; i < kQ8_0BlockElems; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float d = amax / kQ8Max;
    // Quantise with the exact scale (as ggml does); the stored half rounds it afterwards.
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    const std::uint16_t d16 = f32_to_f16(d);
    std::memcpy(dst, &d16, 2);
    for (int i = 0; i < kQ8_0BlockElems; ++i) {
      const float q = std::round(x[i] * inv_d);
      dst[2 + i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
    }
  }
}

void quantize_row(WeightType type, const float* x, std::int64_t n, void* out) {
  auto* dst = static_cast<std::uint8_t*>(out);
  const int elems = weight_block_elems(type);
  const std::size_t bytes = weight_block_bytes(type);
  if (type == WeightType::kQ8_0) return quantize_q8_0(x, n, out);
  for (std::int64_t i = 0; i < n; i += elems, x += elems, dst += bytes) {
    switch (type) {
      case WeightType::kF32: std::memcpy(dst, x, 4); break;
      case WeightType::kF16: store_half(dst, *x); break;
      case WeightType::kBF16: {
        const std::uint16_t h = f32_to_bf16(*x);
        std::memcpy(dst, &h, 2);
        break;
      }
      case WeightType::kQ8_0: break;
      case WeightType::kQ8_0x16:
      case WeightType::kQ4_Kx16:
      case WeightType::kQ3_Kx16:
      case WeightType::kQ2_Kx16:
      case WeightType::kQ5_Kx16:
      case WeightType::kQ6_Kx16:
      case WeightType::kQ4_0x16:
      case WeightType::kQ5_0x16:
      case WeightType::kQ4_1x16:
      case WeightType::kQ5_1x16:
      case WeightType::kMxfp4x16:
      case WeightType::kF16x16: assert(false && "interleaved types are made by repack_for_decode, not encoded"); break;
      case WeightType::kQ4_0: encode_symmetric_32(x, 4, dst); break;
      case WeightType::kQ5_0: encode_symmetric_32(x, 5, dst); break;
      case WeightType::kQ4_1: encode_affine_32(x, 4, dst); break;
      case WeightType::kQ5_1: encode_affine_32(x, 5, dst); break;
      case WeightType::kQ2_K: encode_q2_k(x, dst); break;
      case WeightType::kQ3_K: encode_q3_k(x, dst); break;
      case WeightType::kQ4_K: encode_q4_k_or_q5_k(x, false, dst); break;
      case WeightType::kQ5_K: encode_q4_k_or_q5_k(x, true, dst); break;
      case WeightType::kQ6_K: encode_q6_k(x, dst); break;
      case WeightType::kMxfp4: quantize_mxfp4(x, elems, dst); break;
    }
  }
}

void dequantize_row_q8_0(const void* blocks, std::int64_t n, float* out) {
  const auto* src = static_cast<const std::uint8_t*>(blocks);
  for (std::int64_t b = 0; b < n / kQ8_0BlockElems; ++b, src += kQ8_0BlockBytes, out += kQ8_0BlockElems) {
    std::uint16_t d16;
    std::memcpy(&d16, src, 2);
    const float d = f16_to_f32(d16);
    for (int i = 0; i < kQ8_0BlockElems; ++i) out[i] = d * static_cast<float>(static_cast<std::int8_t>(src[2 + i]));
  }
}

}  // namespace kvstash::kernels
