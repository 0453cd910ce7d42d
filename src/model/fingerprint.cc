#include "model/fingerprint.h"

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

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

bool read_sidecar(const std::filesystem::path& p, Digest* out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  in.read(reinterpret_cast<char*>(out->data()), 32);
  return in.gcount() == 32;
}

void write_sidecar(const std::filesystem::path& p, const Digest& d) {
  std::error_code ec;
  std::filesystem::create_directories(p.parent_path(), ec);
  auto tmp = p;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return;
    out.write(reinterpret_cast<const char*>(d.data()), 32);
  }
  std::filesystem::rename(tmp, p, ec);
}

}  // namespace

Expected<Digest> model_fingerprint(const gguf::File& file, const ModelConfig& c) {
  auto sidecar = sidecar_path(file.path());
  Digest cached{};
  if (!sidecar.empty() && read_sidecar(sidecar, &cached)) return cached;

  const auto& tensors = file.tensors();
  std::vector<Digest> tensor_digests(tensors.size());
  default_thread_pool().run(static_cast<int>(tensors.size()), [&](int i) {
    const auto& t = tensors[static_cast<std::size_t>(i)];
    tensor_digests[static_cast<std::size_t>(i)] = sha256(t.data, t.n_bytes);
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
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    h.update_u32(static_cast<std::uint32_t>(t.name.size())).update(t.name);
    h.update_u32(static_cast<std::uint32_t>(t.type)).update_u32(static_cast<std::uint32_t>(t.dims.size()));
    for (auto dim : t.dims) h.update_u64(dim);
    h.update(tensor_digests[i].data(), 32);
  }
  Digest d = h.finish();
  if (!sidecar.empty()) write_sidecar(sidecar, d);
  return d;
}

}  // namespace kvstash
