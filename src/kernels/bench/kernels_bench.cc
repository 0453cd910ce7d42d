// kernels_bench: matmul speed on the model shapes, as fractions of this machine's own limits.
//
//   decode  (1 and 8 tokens): weight bytes read per second / measure_stream_read_gbs(); and batch 1
//                             against a streaming read of the benchmark's own weight copies ("own")
//   prefill (512 tokens):     GFLOP/s of the whole matmul (conversion + sgemm) / sgemm's own
//                             GFLOP/s on the same shape with f32 weights (measure_gemm_gflops)
//
// Usage: kernels_bench [--types f32,f16,bf16,q8_0,q4_K,...] [--models qwen,llama] [--shapes 896x896,...]
//                      [--no-prefill] [--crossover]
//                      [--threads N] [--prefill-tokens 512] [--hot] [--attention] [--read-trace S]
//                      [--prefetch-sweep]
//
// --attention times one layer's decode attention of one token (14 query heads over 2 KV heads of
// 64, qwen2.5-0.5b) at 4096 tokens of context on one thread: the per-row kernel calls the forward
// pass used to make against the per-KV-block calls it makes now.
//
// --read-trace S reads a 256 MiB buffer (huge pages) every 100 ms for S seconds, with all threads
// and with one, and prints both rates: on this project's 2-vCPU VMs the two-thread read moves
// between ~31 and ~62 GB/s from one second to the next while one thread reads ~30 throughout (the
// two vCPUs at times share one core's memory bandwidth), which is why decode is compared with a
// read taken right after each step.
//
// --prefetch-sweep characterises one core's streaming read as a function of the arithmetic done per
// 64-byte line and of the software prefetch: a synthetic kernel reads a 256 MiB huge-page buffer
// once, with W dependent integer multiplies per line (W = 0 is a plain read), with no software
// prefetch or one line prefetched (T0 or T1) a fixed lead ahead per line read. Each cell is the
// median over three passes of the pass's rate over a plain read of the same buffer right after it;
// the "in L1" column is the same kernel over 16 KiB, its compute rate. It shows where a decode
// kernel of a given arithmetic density can and cannot reach the read rate on this machine, apart
// from any quantized format (BENCHMARKS.md, issue 14).
//
// --hot reads the same weights every call (cache-resident for all but the largest shapes): the
// kernels' compute ceiling, which must sit well above the streaming read for decode to reach it.
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "common/huge_pages.h"
#include "kernels/kernels.h"
#include "kernels/machine_limits.h"
#include "kernels/simd_dispatch.h"
#include "kernels/test_weights.h"

using namespace kvstash;
using namespace kvstash::kernels;

namespace {

struct Shape {
  const char* model;
  std::int64_t rows, cols;
};

const Shape kShapes[] = {
    {"qwen", 896, 896},     {"qwen", 128, 896},     {"qwen", 4864, 896},   {"qwen", 896, 4864},
    {"qwen", 151936, 896},  {"llama", 2048, 2048},  {"llama", 512, 2048},  {"llama", 8192, 2048},
    {"llama", 2048, 8192},  {"llama", 128256, 2048},
};

// Far beyond any last-level cache (lscpu says 32 MiB here, yet 64 MiB working sets still read at
// several times DRAM speed: the host's cache is larger than the VM reports).
constexpr std::size_t kDecodeWorkingSetBytes = std::size_t{512} << 20;

// Fast random bytes that decode to ordinary values (no NaN or inf): filling a GiB with a real
// distribution would take longer than the benchmark.
std::vector<std::uint8_t> fill_weights(WeightType type, std::int64_t rows, std::int64_t cols) {
  std::vector<std::uint8_t> bytes(row_bytes_for(type, cols) * rows);
  std::uint64_t s = 0x9e3779b97f4a7c15ull;
  auto next = [&s] { s ^= s << 13; s ^= s >> 7; s ^= s << 17; return s; };
  const std::size_t n = bytes.size();
  if (is_quantized(type)) {  // random codes, every f16 scale field 0x2000 (2^-7), MXFP4's scale 2^-7
    for (std::size_t i = 0; i < n; i += 8) { const std::uint64_t r = next(); std::memcpy(&bytes[i], &r, std::min<std::size_t>(8, n - i)); }
    const std::size_t block = weight_block_bytes(type);
    for (std::size_t b = 0; b < n; b += block) {
      for (int f : half_fields(type)) { bytes[b + f] = 0; bytes[b + f + 1] = 0x20; }
      // MXFP4's E8M0 scale byte: 2^-7 too (random bytes would reach denormals and infinities, whose
      // float arithmetic is many times slower).
      if (type == WeightType::kMxfp4) bytes[b] = 121;
    }
    return bytes;
  }
  // Masks keep the sign and mantissa random and the exponent in [0.5, 1).
  const std::uint64_t keep = type == WeightType::kF32 ? 0x807fffff807fffffull
                             : type == WeightType::kF16 ? 0x83ff83ff83ff83ffull : 0x807f807f807f807full;
  const std::uint64_t set = type == WeightType::kF32 ? 0x3f0000003f000000ull
                            : type == WeightType::kF16 ? 0x3800380038003800ull : 0x3f003f003f003f00ull;
  for (std::size_t i = 0; i + 8 <= n; i += 8) { const std::uint64_t r = (next() & keep) | set; std::memcpy(&bytes[i], &r, 8); }
  return bytes;
}

template <typename F>
double best_seconds(F&& f, double min_total_s = 0.3, int min_reps = 3) {
  f();  // warm-up: caches, page mapping, OpenBLAS threads
  double best = 1e30, total = 0.0;
  for (int reps = 0; reps < min_reps || (total < min_total_s && reps < 1000); ++reps) {
    const auto start = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

// One layer's decode attention for one token over a long context, in cache: per-row calls, one
// call per KV block and query head, and one call per KV block for all the heads of a GQA group.
void bench_attention() {
  constexpr int kHeadDim = 64, kKvRow = 128, kBlock = 16, kContext = 4096, kHeads = 14, kGroup = 7;
  std::vector<std::uint16_t> k(static_cast<std::size_t>(kContext) * kKvRow, 0x3c00), v(k.size(), 0x3800);
  std::vector<float> q(static_cast<std::size_t>(kHeadDim) * kHeads, 0.01f),
      scores(static_cast<std::size_t>(kContext) * kGroup), out(static_cast<std::size_t>(kHeadDim) * kHeads);
  enum Mode { kPerRow, kPerHead, kPerGroup };
  // Heads [h0, h0 + n) of one group.
  auto heads = [&](int h0, int n, Mode mode) {
    const std::size_t offset = static_cast<std::size_t>(h0 / kGroup) * kHeadDim;
    const float* qh = &q[static_cast<std::size_t>(h0) * kHeadDim];
    float* o = &out[static_cast<std::size_t>(h0) * kHeadDim];
    for (int j = 0; j < kContext; j += mode == kPerRow ? 1 : kBlock) {
      const std::uint16_t* kr = &k[static_cast<std::size_t>(j) * kKvRow + offset];
      if (mode == kPerRow) scores[j] = dot_f32_f16(qh, kr, kHeadDim) * 0.125f;
      else dot_f32_f16_rows(qh, n, kr, kKvRow, kBlock, kHeadDim, 0.125f, &scores[j], kContext);
    }
    for (int i = 0; i < n; ++i) softmax_inplace(&scores[static_cast<std::size_t>(i) * kContext], kContext);
    std::fill(o, o + static_cast<std::size_t>(n) * kHeadDim, 0.0f);
    for (int j = 0; j < kContext; j += mode == kPerRow ? 1 : kBlock) {
      const std::uint16_t* vr = &v[static_cast<std::size_t>(j) * kKvRow + offset];
      if (mode == kPerRow) axpy_f16(scores[j], vr, o, kHeadDim);
      else axpy_f16_rows(&scores[j], kContext, n, vr, kKvRow, kBlock, kHeadDim, o);
    }
  };
  double us[3];
  for (Mode mode : {kPerRow, kPerHead, kPerGroup}) {
    us[mode] = 1e6 * best_seconds([&] {
      if (mode == kPerGroup) {
        for (int h = 0; h < kHeads; h += kGroup) heads(h, kGroup, mode);
      } else {
        for (int h = 0; h < kHeads; ++h) heads(h, 1, mode);
      }
    }, 0.2, 5);
  }
  std::printf("attention, one layer, %d heads in groups of %d, context %d, 1 thread: per-row calls %.0f us, "
              "per block and head %.0f us (%.2fx), per block and group %.0f us (%.2fx)\n",
              kHeads, kGroup, kContext, us[kPerRow], us[kPerHead], us[kPerRow] / us[kPerHead], us[kPerGroup],
              us[kPerRow] / us[kPerGroup]);
}

int read_trace(ThreadPool& pool, double seconds) {
  StreamReader reader(pool, std::size_t{256} << 20);
  if (!reader.ok()) {
    std::fprintf(stderr, "cannot allocate %zu bytes for the read trace\n", reader.size());
    return 1;
  }
  ThreadPool one(1);
  std::printf("seconds  %d threads GB/s  1 thread GB/s\n", pool.size());
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (t >= seconds) break;
    const double all = reader.pass_gbs();
    const double single = stream_read_pass_gbs(one, reader.data(), reader.size());
    std::printf("%7.2f  %17.1f  %13.1f\n", t, all, single);
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return 0;
}

volatile std::uint32_t sweep_sink;  // keeps the sweep's sums, so that its loads are not dropped

// One pass of --prefetch-sweep's kernel over [p, p + bytes) (positions taken & mask, so a small
// mask keeps it in L1): per 64-byte line, two 32-byte loads, each put through `work` dependent
// multiplies, added into the sums; kHint < 0: no software prefetch, else the line `ahead` bytes on
// is prefetched with that hint. GB/s of the pass.
template <int kHint>
__attribute__((target("avx2"))) double density_pass(const std::uint8_t* p, std::size_t bytes, std::size_t mask, int work,
                                                    std::size_t ahead) {
  const __m256i m = _mm256_set1_epi32(3);
  __m256i s0 = _mm256_setzero_si256(), s1 = s0;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t off = 0; off < bytes; off += 64) {
    if constexpr (kHint >= 0) _mm_prefetch(reinterpret_cast<const char*>(p + ((off + ahead) & mask)), static_cast<_mm_hint>(kHint));
    const std::uint8_t* line = p + (off & mask);
    __m256i a = _mm256_load_si256(reinterpret_cast<const __m256i*>(line));
    __m256i b = _mm256_load_si256(reinterpret_cast<const __m256i*>(line + 32));
    for (int w = 0; w < work; ++w) {
      a = _mm256_mullo_epi32(a, m);
      b = _mm256_mullo_epi32(b, m);
    }
    s0 = _mm256_add_epi32(s0, a);
    s1 = _mm256_add_epi32(s1, b);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  alignas(32) std::uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi32(s0, s1));
  for (std::uint32_t lane : lanes) sweep_sink = sweep_sink + lane;
  return static_cast<double>(bytes) / seconds / 1e9;
}

int prefetch_sweep() {
  constexpr std::size_t kBytes = std::size_t{256} << 20, kL1Span = 16 << 10;
  HugePageBuffer buffer = HugePageBuffer::allocate(kBytes);
  if (buffer.data() == nullptr) {
    std::fprintf(stderr, "cannot allocate %zu bytes for the prefetch sweep\n", kBytes);
    return 1;
  }
  std::memset(buffer.data(), 1, kBytes);
  ThreadPool one(1);
  struct Variant {
    const char* name;
    int hint;
    std::size_t ahead;
  };
  const Variant variants[] = {{"none", -1, 0},         {"T0 1K", _MM_HINT_T0, 1 << 10}, {"T0 4K", _MM_HINT_T0, 4 << 10},
                              {"T0 16K", _MM_HINT_T0, 16 << 10}, {"T1 1K", _MM_HINT_T1, 1 << 10}, {"T1 4K", _MM_HINT_T1, 4 << 10},
                              {"T1 16K", _MM_HINT_T1, 16 << 10}};
  auto pass = [&](const Variant& v, std::size_t bytes, std::size_t mask, int work) {
    switch (v.hint) {
      case _MM_HINT_T0: return density_pass<_MM_HINT_T0>(buffer.data(), bytes, mask, work, v.ahead);
      case _MM_HINT_T1: return density_pass<_MM_HINT_T1>(buffer.data(), bytes, mask, work, v.ahead);
      default: return density_pass<-1>(buffer.data(), bytes, mask, work, 0);
    }
  };
  std::printf("one thread, 256 MiB huge pages; each cell: pass GB/s / plain read GB/s right after it, median of 3\n");
  std::printf("%-5s %10s", "work", "in L1 GB/s");
  for (const Variant& v : variants) std::printf(" | %-16s", v.name);
  std::printf("\n");
  for (int work : {0, 1, 2, 3, 4, 6, 8}) {
    const double l1 = pass(variants[0], std::size_t{64} << 20, kL1Span - 1, work);
    std::printf("%-5d %10.1f", work, l1);
    for (const Variant& v : variants) {
      double ratios[3], rates[3];
      for (int r = 0; r < 3; ++r) {
        rates[r] = pass(v, kBytes, ~std::size_t{0}, work);
        ratios[r] = rates[r] / stream_read_pass_gbs(one, buffer.data(), kBytes);
      }
      std::sort(ratios, ratios + 3);
      std::sort(rates, rates + 3);
      std::printf(" | %5.1f GB/s %5.2f", rates[1], ratios[1]);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

constexpr const char* kUsage =
    "usage: kernels_bench [--types f32,f16,bf16,q8_0,q4_K,...] [--models qwen,llama] [--shapes 896x896,...]\n"
    "                     [--no-prefill] [--crossover] [--threads N] [--prefill-tokens 512] [--hot]\n"
    "       kernels_bench --attention | --read-trace SECONDS | --prefetch-sweep\n"
    "Matmul speed on the model shapes as fractions of this machine's streaming read and sgemm rate;\n"
    "the other modes characterise attention, the memory's read over time, and one\n"
    "core's read against arithmetic per line and software prefetch (src/kernels/bench/kernels_bench.cc).\n";

bool listed(const std::string& list, const char* name) {
  return list.empty() || ("," + list + ",").find(std::string(",") + name + ",") != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  std::string types = "f32,f16,bf16,q8_0", models, shapes;
  bool prefill = true, crossover = false, hot = false;
  double trace_seconds = 0.0;
  int threads = 0, prefill_tokens = 512;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--types" && i + 1 < argc) types = argv[++i];
    else if (a == "--models" && i + 1 < argc) models = argv[++i];
    else if (a == "--shapes" && i + 1 < argc) shapes = argv[++i];
    else if (a == "--no-prefill") prefill = false;
    else if (a == "--crossover") crossover = true;
    else if (a == "--hot") hot = true;
    else if (a == "--attention") { bench_attention(); return 0; }
    else if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--prefill-tokens" && i + 1 < argc) prefill_tokens = std::atoi(argv[++i]);
    else if (a == "--read-trace" && i + 1 < argc) trace_seconds = std::atof(argv[++i]);
    else if (a == "--prefetch-sweep") return prefetch_sweep();
    else if (a == "--help" || a == "-h") { std::fputs(kUsage, stdout); return 0; }
    else { std::fprintf(stderr, "unknown argument %s\n%s", a.c_str(), kUsage); return 2; }
  }
  ThreadPool pool(threads);
  if (trace_seconds > 0) return read_trace(pool, trace_seconds);
  const double stream = measure_stream_read_gbs(pool);
  std::printf("simd %s, %d threads, stream read %.1f GB/s\n", simd_path(), pool.size(), stream);
  std::printf("%-6s %-14s %-5s | %9s %6s | %9s %6s | %9s %9s %6s | %8s %6s\n", "model", "shape", "type", "dec1 GB/s", "/strm",
              "dec8 GB/s", "/strm", "pf GFLOPs", "sgemm", "/sgemm", "own GB/s", "d1/own");
  for (const Shape& shape : kShapes) {
    char name[32];
    std::snprintf(name, sizeof(name), "%lldx%lld", static_cast<long long>(shape.rows), static_cast<long long>(shape.cols));
    if (!listed(models, shape.model) || !listed(shapes, name)) continue;
    double sgemm = 0.0;
    if (prefill) sgemm = measure_gemm_gflops(prefill_tokens, static_cast<int>(shape.rows), static_cast<int>(shape.cols), pool);
    std::vector<float> x(static_cast<std::size_t>(prefill_tokens * shape.cols), 0.01f);
    std::vector<float> y(static_cast<std::size_t>(prefill_tokens * shape.rows));
    std::vector<WeightType> all(std::begin(kAllWeightTypes), std::end(kAllWeightTypes));
    all.insert(all.end(), std::begin(kAllInterleavedTypes), std::end(kAllInterleavedTypes));  // as a model load makes them on the AVX-512 path
    for (WeightType type : all) {
      if (!listed(types, weight_type_name(type))) continue;
      if (shape.cols % weight_block_elems(type) != 0) continue;
      const bool repacked = is_interleaved(type);
      const WeightType stored = interleaved_source(type);
      const std::vector<std::uint8_t> bytes = fill_weights(stored, shape.rows, shape.cols);
      WeightView w{stored, bytes.data(), shape.rows, shape.cols, row_bytes_for(stored, shape.cols)};
      if (repacked && repack_bytes(w) == 0) continue;  // not this SIMD path, or not this shape
      const double gb = static_cast<double>(bytes.size()) / 1e9;
      // Decode reads weights that are not in cache, as in a model step that streams every layer:
      // small matrices cycle through copies that together exceed the last-level cache. Each copy
      // starts on a cache line, as a loaded model's matrices do.
      const std::size_t n_copies = hot ? 1 : std::max<std::size_t>(1, kDecodeWorkingSetBytes / bytes.size());
      const std::size_t copy_bytes = repacked ? repack_bytes(w) : bytes.size();
      // In memory advised for huge pages, as a loaded model's weights are (model_loader.cc): on 4 KiB
      // pages the same copies read 20-25% slower on this project's VMs (one thread, 23-25 against
      // 29-33 GB/s).
      const std::size_t copy_stride = (copy_bytes + 63) / 64 * 64;
      HugePageBuffer copies = HugePageBuffer::allocate(copy_stride * n_copies);
      if (copies.data() == nullptr) {
        std::fprintf(stderr, "cannot allocate %zu bytes for the weight copies\n", copy_stride * n_copies);
        return 1;
      }
      std::vector<WeightView> views(n_copies, w);
      for (std::size_t i = 0; i < n_copies; ++i) {
        std::uint8_t* at = copies.data() + i * copy_stride;
        views[i] = repacked ? repack_for_decode(w, at) : w;
        if (!repacked) {
          std::memcpy(at, bytes.data(), bytes.size());
          views[i].data = at;
        }
      }
      w = views[0];
      std::size_t next_copy = 0;
      auto decode = [&](int n) { matmul(views[next_copy++ % n_copies], x.data(), n, y.data(), pool); };
      const double d1 = gb / best_seconds([&] { decode(1); });
      const double d8 = gb / best_seconds([&] { decode(8); });
      // The same copies streamed end to end, cycling as decode does (best pass), right after decode:
      // the limit of these very pages in the machine's present state, which the read at start need
      // not be (on this project's VMs two threads read at ~31 or ~62 GB/s from one second to the
      // next; --read-trace, BENCHMARKS.md).
      double own = 0.0;
      for (int rep = 0; rep < 3; ++rep) {
        for (const WeightView& v : views) {
          own = std::max(own, stream_read_pass_gbs(pool, static_cast<const std::uint8_t*>(v.data), copy_bytes));
        }
      }
      if (crossover) {
        // GFLOP/s around the decode/prefill threshold (kPrefillMinTokens in matmul.cc).
        // Each n through both paths: GFLOP/s as decode/prefill.
        std::printf("  %s %s GFLOP/s decode/prefill:", name, weight_type_name(type));
        for (int n : {8, 16, 32, 48, 64, 128}) {
          const double gflop = 2.0 * n * shape.rows * static_cast<double>(shape.cols) / 1e9;
          set_prefill_min_tokens_for_testing(1 << 30);
          const double dec = gflop / best_seconds([&] { matmul(w, x.data(), n, y.data(), pool); }, 0.1, 2);
          set_prefill_min_tokens_for_testing(1);
          const double pre = gflop / best_seconds([&] { matmul(w, x.data(), n, y.data(), pool); }, 0.1, 2);
          set_prefill_min_tokens_for_testing(0);
          std::printf(" %d:%.0f/%.0f", n, dec, pre);
        }
        std::printf("\n");
        continue;
      }
      double pf = 0.0;
      if (prefill) {
        const double flops = 2.0 * prefill_tokens * shape.rows * static_cast<double>(shape.cols);
        pf = flops / 1e9 / best_seconds([&] { matmul(w, x.data(), prefill_tokens, y.data(), pool); }, 0.0, 2);
      }
      std::printf("%-6s %-14s %-5s | %9.1f %6.2f | %9.1f %6.2f | %9.1f %9.1f %6.2f | %8.1f %6.2f\n", shape.model, name,
                  weight_type_name(type), d1, d1 / stream, d8, d8 / stream, pf, sgemm, sgemm > 0 ? pf / sgemm : 0.0, own,
                  own > 0 ? d1 / own : 0.0);
      std::fflush(stdout);
    }
  }
  return 0;
}
