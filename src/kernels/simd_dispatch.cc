// Run-time choice of the SIMD level: CPU features read once, KVSTASH_SIMD may lower the choice.
#include "kernels/simd_dispatch.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace kvstash::kernels {

const char* simd_path_name(SimdPath path) {
  switch (path) {
    case SimdPath::kScalar: return "scalar";
    case SimdPath::kAvx2: return "avx2";
    case SimdPath::kAvx512: return "avx512";
  }
  return "?";
}

bool amd_core() {
  static const bool amd = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("amd") != 0;
  }();
  return amd;
}

bool cpu_supports(SimdPath path) {
  switch (path) {
    case SimdPath::kScalar:
      return true;
    case SimdPath::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case SimdPath::kAvx512:
      // The avx512 files are built with F, BW, VL, DQ and VNNI (see CMakeLists.txt), and use AVX2 too.
      return cpu_supports(SimdPath::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
  }
  return false;
}

std::vector<SimdPath> supported_simd_paths() {
  std::vector<SimdPath> paths;
  for (SimdPath path : {SimdPath::kScalar, SimdPath::kAvx2, SimdPath::kAvx512}) {
    if (cpu_supports(path)) paths.push_back(path);
  }
  return paths;
}

namespace {

const KernelTable& table_for(SimdPath path) {
  switch (path) {
    case SimdPath::kAvx512: return avx512_kernel_table();
    case SimdPath::kAvx2: return avx2_kernel_table();
    case SimdPath::kScalar: break;
  }
  return scalar_kernel_table();
}

SimdPath choose_from_cpu_and_env() {
  SimdPath best = SimdPath::kScalar;
  if (cpu_supports(SimdPath::kAvx512)) {
    best = SimdPath::kAvx512;
  } else if (cpu_supports(SimdPath::kAvx2)) {
    best = SimdPath::kAvx2;
  }
  // The environment may only lower the level: asking for more than the CPU has would crash.
  if (const char* forced = std::getenv("KVSTASH_SIMD")) {
    SimdPath wanted = best;
    if (std::strcmp(forced, "scalar") == 0) wanted = SimdPath::kScalar;
    if (std::strcmp(forced, "avx2") == 0) wanted = SimdPath::kAvx2;
    if (std::strcmp(forced, "avx512") == 0) wanted = SimdPath::kAvx512;
    if (static_cast<int>(wanted) < static_cast<int>(best)) best = wanted;
  }
  return best;
}

std::atomic<const KernelTable*>& override_table() {
  static std::atomic<const KernelTable*> table{nullptr};
  return table;
}

}  // namespace

const KernelTable& active_kernels() {
  if (const KernelTable* forced = override_table().load(std::memory_order_acquire)) return *forced;
  static const KernelTable& chosen = table_for(choose_from_cpu_and_env());
  return chosen;
}

bool set_simd_path_for_testing(SimdPath path) {
  if (!cpu_supports(path)) return false;
  override_table().store(&table_for(path), std::memory_order_release);
  return true;
}

void reset_simd_path_for_testing() { override_table().store(nullptr, std::memory_order_release); }

const char* simd_path() { return simd_path_name(active_kernels().path); }

}  // namespace kvstash::kernels
