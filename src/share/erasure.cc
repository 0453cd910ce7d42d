#include "share/erasure.h"

#include <isa-l/erasure_code.h>

#include <cstring>

namespace kvstash::share {
namespace {

constexpr char kMagic[8] = {'K', 'V', 'S', 'F', 'R', 'A', 'G', 'S'};
// magic, version u16, k u16, m u16, reserved u16, key[32], chunk_size u64, producer[32]; then
// (k + m) x 32-byte hashes; then the 64-byte signature.
constexpr std::size_t kFixed = 8 + 2 + 2 + 2 + 2 + 32 + 8 + 32;

void put_le(std::string& out, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out += static_cast<char>(v >> (8 * i));
}
std::uint64_t get_le(std::string_view in, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(in[at + i]);
  return v;
}

std::string signed_bytes(const FragmentSet& s) {
  std::string out(kMagic, sizeof kMagic);
  put_le(out, kFragmentSetVersion, 2);
  put_le(out, static_cast<std::uint64_t>(s.scheme.k), 2);
  put_le(out, static_cast<std::uint64_t>(s.scheme.m), 2);
  put_le(out, 0, 2);
  out.append(reinterpret_cast<const char*>(s.key.bytes.data()), 32);
  put_le(out, s.chunk_size, 8);
  out.append(reinterpret_cast<const char*>(s.producer.data()), 32);
  for (const Digest& h : s.hashes) out.append(reinterpret_cast<const char*>(h.data()), h.size());
  return out;
}

// The (k + m) x k Cauchy encoding matrix: its first k rows are the identity (data fragments are
// slices of the chunk) and every k x k submatrix is invertible (any k fragments decode).
std::vector<unsigned char> encode_matrix(const ErasureScheme& s) {
  std::vector<unsigned char> a(static_cast<std::size_t>(s.total() * s.k));
  gf_gen_cauchy1_matrix(a.data(), s.total(), s.k);
  return a;
}

}  // namespace

Expected<ErasureScheme> parse_erasure_scheme(std::string_view text) {
  const auto plus = text.find('+');
  auto number = [](std::string_view t) {
    if (t.empty() || t.size() > 3) return -1;
    int v = 0;
    for (char c : t) {
      if (c < '0' || c > '9') return -1;
      v = v * 10 + (c - '0');
    }
    return v;
  };
  if (plus == std::string_view::npos) return invalid_argument("erasure scheme '" + std::string(text) + "': expected K+M, e.g. 4+2");
  ErasureScheme s{number(text.substr(0, plus)), number(text.substr(plus + 1))};
  if (s.k < 1 || s.m < 1 || s.total() > kMaxFragments) {
    return invalid_argument("erasure scheme '" + std::string(text) + "': K >= 1, M >= 1, K + M <= " + std::to_string(kMaxFragments));
  }
  return s;
}

std::vector<cache::Bytes> erasure_encode(const ErasureScheme& s, std::span<const std::uint8_t> data) {
  const std::size_t len = std::max<std::size_t>(1, (data.size() + s.k - 1) / s.k);
  std::vector<cache::Bytes> fragments(static_cast<std::size_t>(s.total()), cache::Bytes(len, 0));
  for (int i = 0; i < s.k; ++i) {
    const std::size_t at = static_cast<std::size_t>(i) * len;
    if (at < data.size()) std::memcpy(fragments[i].data(), data.data() + at, std::min(len, data.size() - at));
  }
  const auto a = encode_matrix(s);
  std::vector<unsigned char> tables(static_cast<std::size_t>(32 * s.k * s.m));
  ec_init_tables(s.k, s.m, const_cast<unsigned char*>(a.data()) + s.k * s.k, tables.data());
  std::vector<unsigned char*> in, out;
  for (int i = 0; i < s.k; ++i) in.push_back(fragments[i].data());
  for (int i = s.k; i < s.total(); ++i) out.push_back(fragments[i].data());
  ec_encode_data(static_cast<int>(len), s.k, s.m, tables.data(), in.data(), out.data());
  return fragments;
}

Expected<cache::Bytes> erasure_decode(const ErasureScheme& s, std::span<const Fragment> fragments, std::size_t size) {
  // The first k distinct valid fragments.
  std::vector<const Fragment*> use;
  std::vector<bool> seen(static_cast<std::size_t>(s.total()), false);
  for (const Fragment& f : fragments) {
    if (f.index < 0 || f.index >= s.total() || seen[f.index]) continue;
    if (!use.empty() && f.bytes.size() != use.front()->bytes.size()) return invalid_argument("erasure: fragments of unequal length");
    seen[f.index] = true;
    use.push_back(&f);
    if (static_cast<int>(use.size()) == s.k) break;
  }
  if (static_cast<int>(use.size()) < s.k) return invalid_argument("erasure: fewer than K distinct fragments");
  const std::size_t len = use.front()->bytes.size();
  if (size > len * static_cast<std::size_t>(s.k)) return invalid_argument("erasure: size larger than the fragments hold");
  // Rows of the encoding matrix for the fragments we have; its inverse maps them back to the data.
  const auto a = encode_matrix(s);
  std::vector<unsigned char> b(static_cast<std::size_t>(s.k * s.k)), inverse(b.size());
  for (int r = 0; r < s.k; ++r) std::memcpy(&b[r * s.k], &a[use[r]->index * s.k], static_cast<std::size_t>(s.k));
  if (gf_invert_matrix(b.data(), inverse.data(), s.k) != 0) return internal_error("erasure: singular decode matrix");
  cache::Bytes out(len * static_cast<std::size_t>(s.k));
  std::vector<unsigned char> tables(static_cast<std::size_t>(32 * s.k * s.k));
  ec_init_tables(s.k, s.k, inverse.data(), tables.data());
  std::vector<unsigned char*> in, dst;
  for (const Fragment* f : use) in.push_back(const_cast<unsigned char*>(f->bytes.data()));
  for (int i = 0; i < s.k; ++i) dst.push_back(out.data() + static_cast<std::size_t>(i) * len);
  ec_encode_data(static_cast<int>(len), s.k, s.k, tables.data(), in.data(), dst.data());
  out.resize(size);
  return out;
}

FragmentSet make_fragment_set(const cache::ChunkKey& key, const ErasureScheme& scheme, std::uint64_t chunk_size,
                              const std::vector<cache::Bytes>& fragments, const identity::NodeIdentity& producer) {
  FragmentSet s;
  s.key = key;
  s.scheme = scheme;
  s.chunk_size = chunk_size;
  for (const auto& f : fragments) s.hashes.push_back(sha256(f.data(), f.size()));
  s.producer = producer.public_key();
  s.signature = producer.sign(kFragmentsDomain, signed_bytes(s));
  return s;
}

std::string encode_fragment_set(const FragmentSet& s) {
  std::string out = signed_bytes(s);
  out.append(reinterpret_cast<const char*>(s.signature.data()), s.signature.size());
  return out;
}

Expected<FragmentSet> decode_fragment_set(std::string_view in) {
  if (in.size() < kFixed + 64 || std::memcmp(in.data(), kMagic, sizeof kMagic) != 0) return corrupt("fragment set: malformed");
  if (get_le(in, 8, 2) != kFragmentSetVersion) return corrupt("fragment set: unknown version");
  FragmentSet s;
  s.scheme.k = static_cast<int>(get_le(in, 10, 2));
  s.scheme.m = static_cast<int>(get_le(in, 12, 2));
  if (s.scheme.k < 1 || s.scheme.m < 1 || s.scheme.total() > kMaxFragments) return corrupt("fragment set: bad K+M");
  if (in.size() != kFixed + 32 * static_cast<std::size_t>(s.scheme.total()) + 64) return corrupt("fragment set: wrong length");
  std::memcpy(s.key.bytes.data(), in.data() + 16, 32);
  s.chunk_size = get_le(in, 48, 8);
  std::memcpy(s.producer.data(), in.data() + 56, 32);
  for (int i = 0; i < s.scheme.total(); ++i) {
    Digest h;
    std::memcpy(h.data(), in.data() + kFixed + 32 * static_cast<std::size_t>(i), 32);
    s.hashes.push_back(h);
  }
  std::memcpy(s.signature.data(), in.data() + in.size() - 64, 64);
  return s;
}

bool fragment_set_verifies(const FragmentSet& s, const cache::ChunkKey& key) {
  return s.key == key && static_cast<int>(s.hashes.size()) == s.scheme.total() &&
         identity::verify(s.producer, kFragmentsDomain, signed_bytes(s), s.signature);
}

bool fragment_matches(const FragmentSet& s, int index, std::span<const std::uint8_t> bytes) {
  return index >= 0 && index < static_cast<int>(s.hashes.size()) && sha256(bytes.data(), bytes.size()) == s.hashes[index];
}

}  // namespace kvstash::share
