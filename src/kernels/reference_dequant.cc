// Block-by-block decoding in double precision (see reference_dequant.h).
#include "kernels/reference_dequant.h"

#include <cmath>

#include <cstring>

#include "common/fp16.h"

namespace kvstash::kernels {
namespace {

double half(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  return static_cast<double>(f16_to_f32(h));
}

void q4_0(const std::uint8_t* b, double* y) {
  const double d = half(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * ((b[2 + j] & 0x0f) - 8);
    y[j + 16] = d * ((b[2 + j] >> 4) - 8);
  }
}

void q4_1(const std::uint8_t* b, double* y) {
  const double d = half(b), m = half(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * (b[4 + j] & 0x0f) + m;
    y[j + 16] = d * (b[4 + j] >> 4) + m;
  }
}

// Q5_0 / Q5_1: bit j of the 32-bit qh is the fifth bit of weight j.
void q5(const std::uint8_t* b, bool with_min, double* y) {
  const double d = half(b), m = with_min ? half(b + 2) : 0.0;
  const std::uint8_t* qh_bytes = b + (with_min ? 4 : 2);
  std::uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  const std::uint8_t* qs = qh_bytes + 4;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
    y[j] = with_min ? d * lo + m : d * (lo - 16);
    y[j + 16] = with_min ? d * hi + m : d * (hi - 16);
  }
}

void q2_k(const std::uint8_t* b, double* y) {
  const std::uint8_t* scales = b;
  const std::uint8_t* q = b + 16;
  const double d = half(b + 80), dmin = half(b + 82);
  int group = 0;
  for (int half_block = 0; half_block < 2; ++half_block, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int part = 0; part < 2; ++part, ++group) {
        const double dl = d * (scales[group] & 0x0f), ml = dmin * (scales[group] >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * ((q[part * 16 + l] >> shift) & 3) - ml;
      }
    }
  }
}

void q3_k(const std::uint8_t* b, double* y) {
  const std::uint8_t* hmask = b;
  const std::uint8_t* q = b + 32;
  const std::uint8_t* packed = b + 96;
  const double d = half(b + 108);
  // 16 six-bit scales: low nibbles in bytes 0-7 (two per byte: scale g and g + 8), the top two
  // bits of scale g in byte 8 + g % 4 at bit position 2 * (g / 4).
  int scales[16];
  for (int g = 0; g < 16; ++g) {
    const int low = (packed[g % 8] >> (g < 8 ? 0 : 4)) & 0x0f;
    const int high = (packed[8 + g % 4] >> (2 * (g / 4))) & 3;
    scales[g] = (low | high << 4) - 32;
  }
  int group = 0, bit = 0;
  for (int half_block = 0; half_block < 2; ++half_block, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, ++bit) {
      for (int part = 0; part < 2; ++part, ++group) {
        for (int l = part * 16; l < part * 16 + 16; ++l) {
          const int low = (q[l] >> shift) & 3;
          const int sub = (hmask[l] >> bit) & 1 ? 0 : 4;
          *y++ = d * scales[group] * (low - sub);
        }
      }
    }
  }
}

// Q4_K / Q5_K share the 12-byte packing of eight 6-bit scales and eight 6-bit mins.
void k4_scales(const std::uint8_t* p, int* sc, int* mn) {
  for (int g = 0; g < 8; ++g) {
    if (g < 4) {
      sc[g] = p[g] & 63;
      mn[g] = p[g + 4] & 63;
    } else {
      sc[g] = (p[g + 4] & 0x0f) | ((p[g - 4] >> 6) << 4);
      mn[g] = (p[g + 4] >> 4) | ((p[g] >> 6) << 4);
    }
  }
}

void q4_k_or_q5_k(const std::uint8_t* b, bool five_bits, double* y) {
  const double d = half(b), dmin = half(b + 2);
  int sc[8], mn[8];
  k4_scales(b + 4, sc, mn);
  const std::uint8_t* qh = b + 16;
  const std::uint8_t* q = b + (five_bits ? 48 : 16);
  for (int pair = 0; pair < 4; ++pair, q += 32) {
    for (int nibble = 0; nibble < 2; ++nibble) {
      const int g = pair * 2 + nibble;
      for (int l = 0; l < 32; ++l) {
        int v = (q[l] >> (4 * nibble)) & 0x0f;
        if (five_bits) v += ((qh[l] >> g) & 1) ? 16 : 0;
        *y++ = d * sc[g] * v - dmin * mn[g];
      }
    }
  }
}

void q6_k(const std::uint8_t* b, double* y) {
  const std::uint8_t* ql = b;
  const std::uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
  const double d = half(b + 208);
  for (int half_block = 0; half_block < 2; ++half_block, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int g = l / 16;
      const int q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[g] * q1;
      y[l + 32] = d * sc[g + 2] * q2;
      y[l + 64] = d * sc[g + 4] * q3;
      y[l + 96] = d * sc[g + 6] * q4;
    }
  }
}

void q8_0(const std::uint8_t* b, double* y) {
  const double d = half(b);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<std::int8_t>(b[2 + j]);
}

}  // namespace

void reference_dequantize_block(WeightType type, const std::uint8_t* block, double* out) {
  switch (type) {
    case WeightType::kF32: {
      float f;
      std::memcpy(&f, block, 4);
      *out = f;
      return;
    }
    case WeightType::kF16: *out = half(block); return;
    case WeightType::kBF16: {
      std::uint16_t h;
      std::memcpy(&h, block, 2);
      *out = bf16_to_f32(h);
      return;
    }
    case WeightType::kQ8_0: return q8_0(block, out);
    case WeightType::kQ4_0: return q4_0(block, out);
    case WeightType::kQ4_1: return q4_1(block, out);
    case WeightType::kQ5_0: return q5(block, false, out);
    case WeightType::kQ5_1: return q5(block, true, out);
    case WeightType::kQ2_K: return q2_k(block, out);
    case WeightType::kQ3_K: return q3_k(block, out);
    case WeightType::kQ4_K: return q4_k_or_q5_k(block, false, out);
    case WeightType::kQ5_K: return q4_k_or_q5_k(block, true, out);
    case WeightType::kQ6_K: return q6_k(block, out);
    case WeightType::kMxfp4: {
      // The OCP MX format: scale 2^(e - 127); E2M1 code s|ee|m, value (-1)^s 2^(ee - 1) (1 + m/2)
      // for ee > 0, m/2 for ee = 0 (computed from the bits, not from mxfp4.h's table).
      const double scale = std::ldexp(1.0, static_cast<int>(block[0]) - 127);
      for (int j = 0; j < 32; ++j) {
        const int code = j < 16 ? block[1 + j] & 15 : block[1 + j - 16] >> 4;
        const int ee = (code >> 1) & 3, m = code & 1;
        const double mag = ee == 0 ? m * 0.5 : std::ldexp(1.0 + m * 0.5, ee - 1);
        out[j] = (code & 8 ? -mag : mag) * scale;
      }
      return;
    }
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
    case WeightType::kF16x16: break;  // not a block layout (interleaved16.h): its rows are compared via dequantize_rows
  }
}

void reference_dequantize_row(WeightType type, const void* row, std::int64_t n, double* out) {
  const auto* p = static_cast<const std::uint8_t*>(row);
  const int elems = weight_block_elems(type);
  const std::size_t bytes = weight_block_bytes(type);
  for (std::int64_t i = 0; i < n; i += elems, p += bytes) reference_dequantize_block(type, p, out + i);
}

}  // namespace kvstash::kernels
