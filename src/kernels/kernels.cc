// The public entry points of kernels.h that forward to the active SIMD table, and the weight-type
// facts they share. matmul() lives in matmul.cc.
#include "kernels/kernels.h"

#include <cassert>
#include <cstring>
#include <utility>

#include "kernels/interleaved16.h"
#include "kernels/mxfp4.h"
#include "kernels/quant_formats.h"
#include "kernels/simd_dispatch.h"

namespace kvstash::kernels {

namespace {

struct WeightTypeFacts {
  WeightType type;
  const char* name;
  int block_elems;
  std::size_t block_bytes;  // GGUF block sizes (quant_formats.h lists the layouts)
};

constexpr WeightTypeFacts kFacts[] = {
    {WeightType::kF32, "f32", 1, 4},      {WeightType::kF16, "f16", 1, 2},      {WeightType::kBF16, "bf16", 1, 2},
    {WeightType::kQ8_0, "q8_0", 32, 34},  {WeightType::kQ4_0, "q4_0", 32, 18},  {WeightType::kQ4_1, "q4_1", 32, 20},
    {WeightType::kQ5_0, "q5_0", 32, 22},  {WeightType::kQ5_1, "q5_1", 32, 24},  {WeightType::kQ2_K, "q2_K", 256, 84},
    {WeightType::kQ3_K, "q3_K", 256, 110}, {WeightType::kQ4_K, "q4_K", 256, 144}, {WeightType::kQ5_K, "q5_K", 256, 176},
    {WeightType::kQ6_K, "q6_K", 256, 210}, {WeightType::kQ8_0x16, "q8_0x16", 32, 34},
    {WeightType::kQ4_Kx16, "q4_Kx16", 256, 144},  // row_bytes as the GGUF original's (interleaved16.h)
    {WeightType::kQ6_Kx16, "q6_Kx16", 256, 210}, {WeightType::kQ4_0x16, "q4_0x16", 32, 18},
    {WeightType::kQ5_0x16, "q5_0x16", 32, 22}, {WeightType::kF16x16, "f16x16", 1, 2},
    {WeightType::kQ5_Kx16, "q5_Kx16", 256, 176}, {WeightType::kQ4_1x16, "q4_1x16", 32, 20},
    {WeightType::kQ5_1x16, "q5_1x16", 32, 24}, {WeightType::kQ3_Kx16, "q3_Kx16", 256, 110},
    {WeightType::kQ2_Kx16, "q2_Kx16", 256, 84}, {WeightType::kMxfp4, "mxfp4", 32, 17},
    {WeightType::kMxfp4x16, "mxfp4x16", 32, 17},
};

// Each interleaved type and the GGUF type repack_for_decode makes it from.
constexpr std::pair<WeightType, WeightType> kInterleavedFrom[] = {
    {WeightType::kQ8_0x16, WeightType::kQ8_0}, {WeightType::kQ4_0x16, WeightType::kQ4_0}, {WeightType::kQ5_0x16, WeightType::kQ5_0},
    {WeightType::kQ4_1x16, WeightType::kQ4_1}, {WeightType::kQ5_1x16, WeightType::kQ5_1}, {WeightType::kQ2_Kx16, WeightType::kQ2_K},
    {WeightType::kQ3_Kx16, WeightType::kQ3_K}, {WeightType::kQ4_Kx16, WeightType::kQ4_K}, {WeightType::kQ5_Kx16, WeightType::kQ5_K},
    {WeightType::kQ6_Kx16, WeightType::kQ6_K}, {WeightType::kF16x16, WeightType::kF16}, {WeightType::kMxfp4x16, WeightType::kMxfp4}};

// The interleaved type made from a GGUF type.
WeightType interleaved_of(WeightType source) {
  for (auto [interleaved, from] : kInterleavedFrom) {
    if (from == source) return interleaved;
  }
  assert(false && "no interleaved layout for this type");
  return source;
}

const WeightTypeFacts& facts(WeightType type) {
  for (const WeightTypeFacts& f : kFacts) {
    if (f.type == type) return f;
  }
  return kFacts[0];
}

}  // namespace

const char* weight_type_name(WeightType type) { return facts(type).name; }
int weight_block_elems(WeightType type) { return facts(type).block_elems; }
WeightType interleaved_source(WeightType type) {
  for (auto [interleaved, from] : kInterleavedFrom) {
    if (interleaved == type) return from;
  }
  return type;
}
std::size_t weight_block_bytes(WeightType type) { return facts(type).block_bytes; }

std::size_t row_bytes_for(WeightType type, std::int64_t cols) {
  const WeightTypeFacts& f = facts(type);
  return static_cast<std::size_t>(cols) / static_cast<std::size_t>(f.block_elems) * f.block_bytes;
}

// The GGUF types whose interleaved layout the AVX2 kernels multiply (interleaved_avx2.cc); the
// AVX-512 kernels read every interleaved layout.
bool avx2_reads_interleaved(WeightType type) {
  return type == WeightType::kQ8_0 || type == WeightType::kQ4_0 || type == WeightType::kQ5_0 || type == WeightType::kQ4_1 ||
         type == WeightType::kQ5_1 || type == WeightType::kQ4_K;
}

std::size_t repack_bytes(const WeightView& w) {
  const SimdPath path = active_kernels().path;
  if (path == SimdPath::kScalar || (path == SimdPath::kAvx2 && !avx2_reads_interleaved(w.type))) return 0;
  if ((w.type == WeightType::kQ8_0 || w.type == WeightType::kQ4_0 || w.type == WeightType::kQ5_0 || w.type == WeightType::kQ4_1 ||
       w.type == WeightType::kQ5_1) &&
      q8x16::fits(w.rows, w.cols)) {
    return w.row_bytes * static_cast<std::size_t>(w.rows);
  }
  if ((w.type == WeightType::kQ4_K || w.type == WeightType::kQ5_K) && q8x16::q4k::fits(w.rows, w.cols)) {
    return static_cast<std::size_t>(w.rows / q8x16::kGroupRows) * q8x16::q4k::group_bytes(w.type == WeightType::kQ5_K, w.cols);
  }
  if (w.type == WeightType::kQ2_K && q8x16::q2k::fits(w.rows, w.cols)) {
    return static_cast<std::size_t>(w.rows / q8x16::kGroupRows) * q8x16::q2k::group_bytes(w.cols);
  }
  if (w.type == WeightType::kQ3_K && q8x16::q3k::fits(w.rows, w.cols)) {
    return static_cast<std::size_t>(w.rows / q8x16::kGroupRows) * q8x16::q3k::group_bytes(w.cols);
  }
  if (w.type == WeightType::kQ6_K && q8x16::q6k::fits(w.rows, w.cols)) {
    return static_cast<std::size_t>(w.rows / q8x16::kGroupRows) * q8x16::q6k::group_bytes(w.cols);
  }
  if (w.type == WeightType::kF16 && q8x16::f16::fits(w.rows, w.cols)) {
    return static_cast<std::size_t>(w.rows / q8x16::kGroupRows) * q8x16::f16::group_bytes(w.cols);
  }
  if (w.type == WeightType::kMxfp4 && q8x16::mxfp4::fits(w.rows, w.cols)) {
    return static_cast<std::size_t>(w.rows / q8x16::kGroupRows) * q8x16::mxfp4::group_bytes(w.cols);
  }
  return 0;
}

namespace {

// Writes an interleaved copy front to back: for each group of 16 rows and each unit of unit_cols
// columns (interleaved16.h), fill(out, row) writes the unit's unit_bytes at out (zeroed first),
// reading row l's GGUF blocks of the unit from row(l).
template <class Fill>
void repack_units(const WeightView& w, std::int64_t unit_cols, std::size_t unit_bytes, std::uint8_t* out, Fill&& fill) {
  const auto* src = static_cast<const std::uint8_t*>(w.data);
  const std::size_t src_unit = row_bytes_for(w.type, unit_cols);
  for (std::int64_t g = 0; g < w.rows / q8x16::kGroupRows; ++g) {
    for (std::int64_t u = 0; u < w.cols / unit_cols; ++u) {
      const std::uint8_t* first = src + static_cast<std::size_t>(g * q8x16::kGroupRows) * w.row_bytes + u * src_unit;
      std::memset(out, 0, unit_bytes);
      fill(out, [&](int l) { return first + l * w.row_bytes; });
      out += unit_bytes;
    }
  }
}

// Q8_0 (34 bytes: d, qs[32]), two blocks per unit: the 16 scales of each, then 8 chunks of 4
// weights per row, each byte + 128 (XOR 0x80 on the two's complement).
void repack_q8_0(const WeightView& w, std::uint8_t* out) {
  repack_units(w, 64, q8x16::kUnitBytes, out, [](std::uint8_t* unit, auto row) {
    for (int j = 0; j < 2; ++j) {
      std::uint8_t* weights = unit + q8x16::kScalesBytes + j * q8x16::kBlockWeightBytes;
      for (int l = 0; l < q8x16::kGroupRows; ++l) {
        const std::uint8_t* block = row(l) + j * kQ8_0BlockBytes;
        std::memcpy(unit + j * 32 + l * 2, block, 2);
        for (int k = 0; k < 8; ++k) {
          std::uint32_t four;
          std::memcpy(&four, block + 2 + k * 4, 4);
          four ^= 0x80808080u;
          std::memcpy(weights + k * 64 + l * 4, &four, 4);
        }
      }
    }
  });
}

// Q4_K (144 bytes: d, dmin, 12 bytes of packed scales and mins, qs[128]) into 2368-byte units, and
// Q5_K (176 bytes: the same with qh[32] before qs) into 2880-byte ones.
void repack_q4_k(const WeightView& w, bool fifth, std::uint8_t* out) {
  namespace q4k = q8x16::q4k;
  repack_units(w, 256, q4k::super_block_bytes(fifth), out, [fifth](std::uint8_t* unit, auto row) {
    for (int l = 0; l < q8x16::kGroupRows; ++l) {
      const std::uint8_t* block = row(l);
      std::memcpy(unit + 2 * l, block, 2);
      std::memcpy(unit + 32 + 2 * l, block + 2, 2);
      const std::uint8_t* p = block + 4;  // quant_formats.h k4_scale_min's packing
      for (int j = 0; j < 8; ++j) {
        const int sc = j < 4 ? p[j] & 63 : (p[j + 4] & 15) | ((p[j - 4] >> 6) << 4);
        const int m = j < 4 ? p[j + 4] & 63 : (p[j + 4] >> 4) | ((p[j] >> 6) << 4);
        unit[q4k::kScales + 16 * j + l] = static_cast<std::uint8_t>(sc);
        unit[q4k::kMins + 32 * (j / 2) + 2 * l + j % 2] = static_cast<std::uint8_t>(m);
      }
      const std::uint8_t* qs = block + (fifth ? 48 : 16);
      for (int pair = 0; pair < 4; ++pair) {
        for (int k = 0; k < 8; ++k) std::memcpy(unit + q4k::codes_at(fifth, pair, k) + l * 4, qs + pair * 32 + k * 4, 4);
      }
      if (!fifth) continue;
      const std::uint8_t* qh = block + 16;  // bit j of qh[i]: weight i of sub-block j
      for (int j = 0; j < 8; ++j) {
        for (int k = 0; k < 8; ++k) {
          std::uint64_t mask;
          std::memcpy(&mask, unit + q4k::mask_at(j, k), 8);
          for (int n = 0; n < 4; ++n) mask |= static_cast<std::uint64_t>((qh[4 * k + n] >> j) & 1) << (4 * l + n);
          std::memcpy(unit + q4k::mask_at(j, k), &mask, 8);
        }
      }
    }
  });
}

// Q2_K (84 bytes: scale bytes[16], qs[64], d, dmin) into 1344-byte units.
void repack_q2_k(const WeightView& w, std::uint8_t* out) {
  namespace q2k = q8x16::q2k;
  repack_units(w, 256, q2k::kSuperBlockBytes, out, [](std::uint8_t* unit, auto row) {
    for (int l = 0; l < q8x16::kGroupRows; ++l) {
      const std::uint8_t* block = row(l);
      std::memcpy(unit + 2 * l, block + 80, 2);
      std::memcpy(unit + 32 + 2 * l, block + 82, 2);
      for (int q = 0; q < 16; ++q) unit[q2k::scale_at(q, l)] = block[q];
      for (int k = 0; k < 8; ++k) {
        for (int h = 0; h < 2; ++h) std::memcpy(unit + q2k::low_at(h, k) + l * 4, block + 16 + 32 * h + 4 * k, 4);
      }
    }
  });
}

// Q3_K (110 bytes: hmask[32], qs[64], 12 bytes of packed 6-bit scales, d) into 1856-byte units.
void repack_q3_k(const WeightView& w, std::uint8_t* out) {
  namespace q3k = q8x16::q3k;
  repack_units(w, 256, q3k::kSuperBlockBytes, out, [](std::uint8_t* unit, auto row) {
    for (int l = 0; l < q8x16::kGroupRows; ++l) {
      const std::uint8_t* block = row(l);
      std::memcpy(unit + 2 * l, block + 108, 2);
      for (int q = 0; q < 16; ++q) unit[q3k::kScales + 16 * q + l] = static_cast<std::uint8_t>(static_cast<std::int8_t>(k3_scale(block + 96, q)));
      for (int k = 0; k < 8; ++k) {
        for (int h = 0; h < 2; ++h) std::memcpy(unit + q3k::low_at(h, k) + l * 4, block + 32 + 32 * h + 4 * k, 4);
        for (int s = 0; s < 8; ++s) {
          std::uint64_t mask;
          std::memcpy(&mask, unit + q3k::mask_at(s, k), 8);
          for (int i = 0; i < 4; ++i) mask |= static_cast<std::uint64_t>((block[4 * k + i] >> s) & 1) << (4 * l + i);
          std::memcpy(unit + q3k::mask_at(s, k), &mask, 8);
        }
      }
    }
  });
}

// Q6_K (210 bytes: ql[128], qh[64], int8 scales[16], d) into 3392-byte units.
void repack_q6_k(const WeightView& w, std::uint8_t* out) {
  namespace q6k = q8x16::q6k;
  repack_units(w, 256, q6k::kSuperBlockBytes, out, [](std::uint8_t* unit, auto row) {
    for (int l = 0; l < q8x16::kGroupRows; ++l) {
      const std::uint8_t* block = row(l);
      std::memcpy(unit + 2 * l, block + 208, 2);
      for (int q = 0; q < 16; ++q) unit[q6k::kScales + 16 * q + l] = block[192 + q];
      for (int h = 0; h < 2; ++h) {
        for (int k = 0; k < 8; ++k) {
          for (int jj = 0; jj < 2; ++jj) {
            std::memcpy(unit + q6k::low_at(h, jj, k) + l * 4, block + 64 * h + 32 * jj + 4 * k, 4);
          }
          std::memcpy(unit + q6k::high_at(h, k) + l * 4, block + 128 + 32 * h + 4 * k, 4);
        }
      }
    }
  });
}

// Q4_0 (18 bytes: d, qs[16]), Q5_0 (22: d, qh u32, qs[16]), Q4_1 (20: d, m, qs[16]) and Q5_1 (24:
// d, m, qh u32, qs[16]), two blocks per unit of 576, 704, 640 or 768 bytes.
void repack_block32(const WeightView& w, std::uint8_t* out) {
  const q8x16::b32::Form f = q8x16::b32::form_of(w.type);
  const std::size_t block_bytes = weight_block_bytes(w.type), qh = f.min ? 4 : 2, qs = qh + (f.fifth ? 4 : 0);
  repack_units(w, 64, q8x16::b32::unit_bytes(f), out, [&](std::uint8_t* unit, auto row) {
    for (int j = 0; j < 2; ++j) {
      std::uint8_t* codes = unit + q8x16::b32::codes_at(f) + 256 * j;
      for (int l = 0; l < q8x16::kGroupRows; ++l) {
        const std::uint8_t* block = row(l) + j * block_bytes;
        std::memcpy(unit + 32 * j + 2 * l, block, 2);
        if (f.min) std::memcpy(unit + q8x16::b32::kMins + 32 * j + 2 * l, block + 2, 2);
        for (int k = 0; k < 4; ++k) std::memcpy(codes + 64 * k + 4 * l, block + qs + 4 * k, 4);
        if (!f.fifth) continue;
        std::uint32_t bits;
        std::memcpy(&bits, block + qh, 4);
        std::uint8_t* masks = unit + q8x16::b32::masks_at(f) + 64 * j;
        for (int m = 0; m < 8; ++m) {  // mask m = 4 half + k: weights 16 half + 4k + i
          std::uint64_t mask;
          std::memcpy(&mask, masks + 8 * m, 8);
          for (int i = 0; i < 4; ++i) mask |= static_cast<std::uint64_t>((bits >> (16 * (m / 4) + 4 * (m % 4) + i)) & 1) << (4 * l + i);
          std::memcpy(masks + 8 * m, &mask, 8);
        }
      }
    }
  });
}

// MXFP4 (17 bytes: e, qs[16]) into units of four blocks (the last may hold fewer; repack_units'
// units are whole, so the group is written here).
void repack_mxfp4(const WeightView& w, std::uint8_t* out) {
  namespace mx = q8x16::mxfp4;
  const auto* src = static_cast<const std::uint8_t*>(w.data);
  const std::int64_t blocks = w.cols / kMxfp4BlockElems;
  const std::size_t group_bytes = mx::group_bytes(w.cols);
  for (std::int64_t g = 0; g < w.rows / q8x16::kGroupRows; ++g, out += group_bytes) {
    std::memset(out, 0, group_bytes);
    for (int l = 0; l < q8x16::kGroupRows; ++l) {
      const std::uint8_t* row = src + static_cast<std::size_t>(g * q8x16::kGroupRows + l) * w.row_bytes;
      for (std::int64_t b = 0; b < blocks; ++b) {
        const std::uint8_t* block = row + b * kMxfp4BlockBytes;
        std::uint8_t* unit = out + static_cast<std::size_t>(b / mx::kUnitBlocks) * mx::kUnitBytes;
        const std::size_t j = static_cast<std::size_t>(b % mx::kUnitBlocks);
        unit[16 * j + static_cast<std::size_t>(l)] = block[0];
        for (int k = 0; k < 4; ++k) std::memcpy(unit + mx::kCodes + mx::kBlockCodes * j + 64 * k + 4 * l, block + 1 + 4 * k, 4);
      }
    }
  }
}

// F16: column c of a group is its 16 rows' values side by side (interleaved16.h). Rows are read 16
// at a time, each front to back, so the source is 16 sequential streams.
void repack_f16(const WeightView& w, std::uint8_t* out) {
  const auto* src = static_cast<const std::uint8_t*>(w.data);
  auto* dst = reinterpret_cast<std::uint16_t*>(out);
  for (std::int64_t g = 0; g < w.rows / q8x16::kGroupRows; ++g) {
    const std::uint8_t* first = src + static_cast<std::size_t>(g * q8x16::kGroupRows) * w.row_bytes;
    for (std::int64_t c = 0; c < w.cols; ++c) {
      for (int l = 0; l < q8x16::kGroupRows; ++l) std::memcpy(dst++, first + l * w.row_bytes + 2 * c, 2);
    }
  }
}

}  // namespace

WeightView repack_for_decode(const WeightView& w, void* dst) {
  assert(repack_bytes(w) > 0);
  WeightView v = w;
  v.data = dst;
  auto* out = static_cast<std::uint8_t*>(dst);
  if (w.type == WeightType::kQ8_0) {
    repack_q8_0(w, out);
  } else if (w.type == WeightType::kQ4_0 || w.type == WeightType::kQ5_0 || w.type == WeightType::kQ4_1 || w.type == WeightType::kQ5_1) {
    repack_block32(w, out);
  } else if (w.type == WeightType::kQ4_K || w.type == WeightType::kQ5_K) {
    repack_q4_k(w, w.type == WeightType::kQ5_K, out);
  } else if (w.type == WeightType::kQ2_K) {
    repack_q2_k(w, out);
  } else if (w.type == WeightType::kQ3_K) {
    repack_q3_k(w, out);
  } else if (w.type == WeightType::kQ6_K) {
    repack_q6_k(w, out);
  } else if (w.type == WeightType::kMxfp4) {
    repack_mxfp4(w, out);
  } else {
    repack_f16(w, out);
  }
  v.type = interleaved_of(w.type);
  return v;
}

void dequantize_rows(const WeightView& w, std::int64_t row_begin, std::int64_t row_end, float* out) {
  assert(row_begin >= 0 && row_begin <= row_end && row_end <= w.rows);
  if (w.type == WeightType::kMxfp4) return mxfp4_dequantize_rows(w, row_begin, row_end, out);
  active_kernels().dequantize_rows(w, row_begin, row_end, out);
}

void rms_norm(const float* x, const float* weight, int n, float eps, float* out) {
  active_kernels().rms_norm(x, weight, n, eps, out);
}
void softmax_inplace(float* x, int n) { active_kernels().softmax_inplace(x, n); }
void silu_mul(const float* gate, const float* up, int n, float* out) { active_kernels().silu_mul(gate, up, n, out); }
void add_inplace(float* y, const float* x, int n) { active_kernels().add_inplace(y, x, n); }
float dot_f32(const float* a, const float* b, int n) { return active_kernels().dot_f32(a, b, n); }
float dot_f32_f16(const float* a, const std::uint16_t* b, int n) { return active_kernels().dot_f32_f16(a, b, n); }
void axpy_f16(float alpha, const std::uint16_t* x, float* y, int n) { active_kernels().axpy_f16(alpha, x, y, n); }
void dot_f32_f16_rows(const float* q, int n_heads, const std::uint16_t* rows, std::size_t row_stride, int n_rows,
                      int n, float scale, float* out, std::size_t out_stride) {
  active_kernels().dot_f32_f16_rows(q, n_heads, rows, row_stride, n_rows, n, scale, out, out_stride);
}
void axpy_f16_rows(const float* alpha, std::size_t alpha_stride, int n_heads, const std::uint16_t* rows,
                   std::size_t row_stride, int n_rows, int n, float* y) {
  active_kernels().axpy_f16_rows(alpha, alpha_stride, n_heads, rows, row_stride, n_rows, n, y);
}
void f32_to_f16_row(const float* x, std::uint16_t* out, int n) { active_kernels().f32_to_f16_row(x, out, n); }
void f16_to_f32_row(const std::uint16_t* x, float* out, int n) { active_kernels().f16_to_f32_row(x, out, n); }

}  // namespace kvstash::kernels
