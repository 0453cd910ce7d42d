#include "model/fingerprint.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "common/thread_pool.h"

namespace kvstash {
namespace {

std::filesystem::path sidecar_path(const std::string& model_path) {
  std::error_code ec;
  auto abs = std::filesystem::absolute(model_path, ec).string();
  struct stat st {};
  if (::stat(model_path.c_str(), &st) != 0) return {};
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::filesystem::path dir = xdg && *xdg ? std::filesystem::path(xdg)
                              : home && *home ? std::filesystem::path(home) / ".cache"
                                              : std::filesystem::path();
  if (dir.empty()) return {};
  Sha256 h;
  h.update(abs).update_u64(static_cast<std::uint64_t>(st.st_size))
      .update_u64(static_cast<std::uint64_t>(st.st_mtim.tv_sec))
      .update_u64(static_cast<std::uint64_t>(st.st_mtim.tv_nsec));
  return dir / "kvstash" / "fingerprints" / to_hex(h.finish());
}

// Sidecar v2: kSidecarMagic ‖ probe (32 bytes) ‖ fingerprint (32 bytes). The probe is a cheap
// SHA-256 of the tensor table and a sample of the weights (sample_probe); a sidecar is used only
// when the file's probe matches, so a different model file that happens to share the path, size
// and mtime (a copy with preserved times, a re-quantization written in the same second) never
// inherits another model's fingerprint. Version-1 sidecars (32 bytes, no probe) are recomputed.
constexpr char kSidecarMagic[8] = {'K', 'V', 'S', 'F', 'P', '2', 0, 0};

// Windows of kProbeWindow bytes at kProbeSamples evenly spaced offsets over the data section, plus
// each tensor's first and last window: about 300 KiB read for any model size (a few ms cold).
constexpr std::uint64_t kProbeWindow = 64;
constexpr std::uint64_t kProbeSamples = 4096;

// The pages the probe reads, asked for all at once before it reads them. From a cold page cache,
// touching ~4,700 scattered pages one by one costs one disk round trip each, and the mapping's
// default readahead turns each into 128 KiB or more: about half of a 1 GB model read before the
// server can start (measured 1.5-2.1 s on a 416 MB/s disk). MADV_RANDOM drops the readahead and
// MADV_WILLNEED queues every page's read so the disk serves them in parallel.
class ProbePrefetch {
 public:
  explicit ProbePrefetch(const gguf::File& file) : begin_(file.data_begin()), size_(file.data_size()) {
    if (size_ > 0) ::madvise(page_of(begin_), span_to(begin_ + size_), MADV_RANDOM);
  }
  ~ProbePrefetch() {
    if (size_ > 0) ::madvise(page_of(begin_), span_to(begin_ + size_), MADV_NORMAL);
  }
  void will_need(const std::uint8_t* p, std::uint64_t n) const {
    ::madvise(page_of(p), static_cast<std::size_t>(p + n - page_of(p)), MADV_WILLNEED);
  }

 private:
  static std::uint8_t* page_of(const std::uint8_t* p) {
    static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    return reinterpret_cast<std::uint8_t*>(reinterpret_cast<std::uintptr_t>(p) / page * page);
  }
  std::size_t span_to(const std::uint8_t* end) const { return static_cast<std::size_t>(end - page_of(begin_)); }
  const std::uint8_t* begin_;
  std::uint64_t size_;
};

// Calls visit(pointer, length) for every window of the probe, in the order it is hashed.
template <typename Visit>
void probe_windows(const gguf::File& file, Visit visit) {
  for (const auto& t : file.tensors()) {
    const std::uint64_t w = std::min(kProbeWindow, t.n_bytes);
    visit(t.data, w);
    visit(t.data + t.n_bytes - w, w);
  }
  const std::uint64_t size = file.data_size();
  if (size > 0) {
    const std::uint64_t w = std::min(kProbeWindow, size);
    for (std::uint64_t i = 0; i < kProbeSamples; ++i) visit(file.data_begin() + (size - w) / (kProbeSamples - 1) * i, w);
  }
}

Digest sample_probe(const gguf::File& file) {
  const ProbePrefetch prefetch(file);
  probe_windows(file, [&](const std::uint8_t* p, std::uint64_t n) { prefetch.will_need(p, n); });
  Sha256 h;
  h.update("kvstash-model-probe-v1");
  for (const auto& t : file.tensors()) {
    h.update_u32(static_cast<std::uint32_t>(t.name.size())).update(t.name);
    h.update_u32(static_cast<std::uint32_t>(t.type)).update_u64(t.offset).update_u64(t.n_bytes);
    const std::uint64_t w = std::min(kProbeWindow, t.n_bytes);
    h.update(t.data, w);
    h.update(t.data + t.n_bytes - w, w);
  }
  const std::uint64_t size = file.data_size();
  if (size > 0) {
    const std::uint64_t w = std::min(kProbeWindow, size);
    for (std::uint64_t i = 0; i < kProbeSamples; ++i) {
      const std::uint64_t at = (size - w) / (kProbeSamples - 1) * i;
      h.update(file.data_begin() + at, w);
    }
  }
  return h.finish();
}

// The sidecar's probe and fingerprint, if it reads back whole with its magic.
struct SidecarEntry {
  Digest probe{};
  Digest fingerprint{};
};
std::optional<SidecarEntry> read_sidecar(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  char magic[sizeof kSidecarMagic];
  SidecarEntry e;
  in.read(magic, sizeof magic);
  in.read(reinterpret_cast<char*>(e.probe.data()), 32);
  in.read(reinterpret_cast<char*>(e.fingerprint.data()), 32);
  if (!in || std::memcmp(magic, kSidecarMagic, sizeof magic) != 0) return std::nullopt;
  return e;
}

void write_sidecar(const std::filesystem::path& p, const Digest& probe, const Digest& d) {
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  auto tmp = p;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return;
    out.write(kSidecarMagic, sizeof kSidecarMagic);
    out.write(reinterpret_cast<const char*>(probe.data()), 32);
    out.write(reinterpret_cast<const char*>(d.data()), 32);
  }
  std::filesystem::rename(tmp, p, ec);
}

}  // namespace

FingerprintProbe probe_fingerprint(const gguf::File& file) {
  FingerprintProbe out;
  out.probe = sample_probe(file);
  const auto sidecar = sidecar_path(file.path());
  if (sidecar.empty()) return out;
  if (std::optional<SidecarEntry> e = read_sidecar(sidecar); e && e->probe == out.probe) out.remembered = e->fingerprint;
  return out;
}

std::optional<Digest> unverified_fingerprint(const std::string& model_path) {
  const auto sidecar = sidecar_path(model_path);
  if (sidecar.empty()) return std::nullopt;
  std::optional<SidecarEntry> e = read_sidecar(sidecar);
  if (!e) return std::nullopt;
  return e->fingerprint;
}

Expected<Digest> model_fingerprint(const gguf::File& file, const ModelConfig& c) {
  const FingerprintProbe p = probe_fingerprint(file);
  if (p.remembered) return *p.remembered;
  return hash_fingerprint(file, c, p.probe);
}

Digest hash_fingerprint(const gguf::File& file, const ModelConfig& c, const Digest& probe) {
  const auto sidecar = sidecar_path(file.path());
  const auto& tensors = file.tensors();
  std::vector<Digest> tensor_digests(tensors.size());
  // Largest first: the threads take the tensors in turn, and the embedding matrix (a quarter of a
  // small model's bytes) taken last would leave the other threads idle while one hashes it.
  std::vector<std::size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return tensors[a].n_bytes > tensors[b].n_bytes; });
  default_thread_pool().run(static_cast<int>(tensors.size()), [&](int task) {
    const std::size_t i = order[static_cast<std::size_t>(task)];
    tensor_digests[i] = sha256(tensors[i].data, tensors[i].n_bytes);
  });
  Sha256 h;
  h.update("kvstash-model-v1").update_u32(static_cast<std::uint32_t>(c.architecture.size())).update(c.architecture);
  for (int v : {c.n_layers, c.n_embd, c.n_heads, c.n_kv_heads, c.head_dim, c.n_ff, c.n_vocab}) {
    h.update_u32(static_cast<std::uint32_t>(v));
  }
  for (float v : {c.rms_eps, c.rope_base}) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    h.update_u32(bits);
  }
  // What the tensors and the keys above do not say and changes the output: the experts each token
  // uses. Added only for MoE models, so the fingerprints of dense models stay as they were.
  for (const LayerSpec& l : c.layers) {
    if (l.ffn.kind != FfnKind::kMoe) continue;
    h.update("moe").update_u32(static_cast<std::uint32_t>(l.ffn.moe.n_used));
    h.update_u32(static_cast<std::uint32_t>(l.ffn.moe.gating)).update_u32(l.ffn.moe.renormalize ? 1 : 0);
    // gpt-oss's clamped activation; hashed only when not SwiGLU (qwen3moe's fingerprints unchanged).
    if (l.ffn.moe.activation != ExpertActivation::kSwiGlu) {
      h.update("act").update_u32(static_cast<std::uint32_t>(l.ffn.moe.activation));
    }
  }
  // mistral3's query temperature (a metadata key); hashed only when present.
  for (const LayerSpec& l : c.layers) {
    if (l.attention.temperature_scale == 0.0f) continue;
    std::uint32_t bits;
    std::memcpy(&bits, &l.attention.temperature_scale, 4);
    h.update("temp").update_u32(bits).update_u32(static_cast<std::uint32_t>(l.attention.temperature_length));
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    h.update_u32(static_cast<std::uint32_t>(t.name.size())).update(t.name);
    h.update_u32(static_cast<std::uint32_t>(t.type)).update_u32(static_cast<std::uint32_t>(t.dims.size()));
    for (auto dim : t.dims) h.update_u64(dim);
    h.update(tensor_digests[i].data(), 32);
  }
  Digest d = h.finish();
  if (!sidecar.empty()) write_sidecar(sidecar, probe, d);
  return d;
}

}  // namespace kvstash
