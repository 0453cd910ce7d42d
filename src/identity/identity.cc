#include "identity/identity.h"

#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace kvstash::identity {
namespace {

// sodium_init() is idempotent and thread-safe; every entry point calls it before using the library.
void init_sodium() {
  static const int ok = sodium_init();
  (void)ok;  // -1 only when no randomness source exists; randombytes would then abort, loudly
}

bool parse_hex32(std::string_view hex, std::array<std::uint8_t, 32>& out) {
  while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.front()))) hex.remove_prefix(1);
  while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.back()))) hex.remove_suffix(1);
  if (hex.size() != 64) return false;
  std::size_t written = 0;
  const char* end = nullptr;
  return sodium_hex2bin(out.data(), out.size(), hex.data(), hex.size(), nullptr, &written, &end) == 0 &&
         written == out.size() && end == hex.data() + hex.size();
}

}  // namespace

std::string sign_message(std::string_view domain, std::string_view message) {
  std::string m;
  m.reserve(domain.size() + 1 + message.size());
  m.push_back(static_cast<char>(domain.size()));  // domains are short tags (< 256 bytes)
  m.append(domain);
  m.append(message);
  return m;
}

bool verify(const PublicKey& key, std::string_view domain, std::string_view message, const Signature& signature) {
  init_sodium();
  const std::string m = sign_message(domain, message);
  return crypto_sign_verify_detached(signature.data(), reinterpret_cast<const unsigned char*>(m.data()), m.size(),
                                     key.data()) == 0;
}

std::string to_hex(const PublicKey& key) {
  std::string hex(key.size() * 2 + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), key.data(), key.size());
  hex.pop_back();
  return hex;
}

Expected<PublicKey> parse_public_key(std::string_view hex) {
  PublicKey key{};
  if (!parse_hex32(hex, key)) return invalid_argument("not an ed25519 public key (64 hex digits): '" + std::string(hex) + "'");
  return key;
}

NodeIdentity NodeIdentity::from_seed(const std::array<std::uint8_t, 32>& seed) {
  init_sodium();
  NodeIdentity id;
  crypto_sign_seed_keypair(id.public_key_.data(), id.secret_key_.data(), seed.data());
  return id;
}

NodeIdentity NodeIdentity::generate() {
  init_sodium();
  std::array<std::uint8_t, 32> seed{};
  randombytes_buf(seed.data(), seed.size());
  NodeIdentity id = from_seed(seed);
  sodium_memzero(seed.data(), seed.size());
  return id;
}

Expected<NodeIdentity> NodeIdentity::load_or_create(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(path, ec)) {
    std::ifstream in(path);
    if (!in) return io_error("identity key file " + path + ": cannot read");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::array<std::uint8_t, 32> seed{};
    if (!parse_hex32(text, seed)) {
      return corrupt("identity key file " + path + ": not a kvstash key file (expected 64 hex digits); not overwritten");
    }
    NodeIdentity id = from_seed(seed);
    sodium_memzero(seed.data(), seed.size());
    return id;
  }
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  init_sodium();
  std::array<std::uint8_t, 32> seed{};
  randombytes_buf(seed.data(), seed.size());
  std::string hex(65, '\0');
  sodium_bin2hex(hex.data(), hex.size(), seed.data(), seed.size());
  hex.back() = '\n';
  sodium_memzero(seed.data(), seed.size());
  // Written whole to a private temporary file (mode 0600), then linked into place: link() fails when
  // the key file exists, so two processes starting at once agree on one key (the loser reads the
  // winner's), and a crash never leaves a half-written key file.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return io_error("identity key file " + path + ": cannot create " + tmp);
  ::chmod(tmp.c_str(), 0600);
  const bool wrote = std::fwrite(hex.data(), 1, hex.size(), f) == hex.size();
  const bool closed = std::fclose(f) == 0;
  sodium_memzero(hex.data(), hex.size());
  const bool linked = wrote && closed && ::link(tmp.c_str(), path.c_str()) == 0;
  const int link_errno = errno;
  std::remove(tmp.c_str());
  if (!linked && !(wrote && closed && link_errno == EEXIST)) return io_error("identity key file " + path + ": cannot write");
  return load_or_create(path);  // ours, or the one another process linked first
}

Signature NodeIdentity::sign(std::string_view domain, std::string_view message) const {
  init_sodium();
  const std::string m = sign_message(domain, message);
  Signature sig{};
  crypto_sign_detached(sig.data(), nullptr, reinterpret_cast<const unsigned char*>(m.data()), m.size(),
                       secret_key_.data());
  return sig;
}

Status TrustList::add_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return io_error("trust file " + path + ": cannot read");
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Expected<PublicKey> key = parse_public_key(line);
    if (!key) return invalid_argument("trust file " + path + ":" + std::to_string(n) + ": " + key.status().message());
    keys_.insert(*key);
  }
  return Status::ok();
}

}  // namespace kvstash::identity
