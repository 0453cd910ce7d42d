// Fuzzes the chunk codec's readers (parse_chunk_header, verify_chunk, decode_chunk): every tier
// and every peer hands them bytes it did not write. The first input byte is a mode, the rest the
// chunk. Mode bit 0 set: the two XXH3 checksums (header, payload) are recomputed over the fuzzed
// bytes first, so that the fuzzer reaches what lies behind them (sizes, flags, decompression)
// instead of spending its time on the checksums. decode_chunk runs twice: against the header's own
// meta (the path where every field matches and the payload is returned) and against a fixed meta.
// A chunk that decodes must be exactly as long as its header says and its payload as long as
// payload_size; re-encoding its meta and payload must decode to the same payload.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cache/chunk_codec.h"
#include "chunk_fixup.h"

namespace {

using kvstash::cache::Bytes;
using kvstash::cache::ChunkMeta;

ChunkMeta fixed_meta() {
  ChunkMeta m;
  m.key.bytes.fill(0x11);
  m.model_fingerprint.fill(0x22);
  m.kv_format = "f16-kvh-v1";
  m.token_count = 16;
  m.n_layers = 2;
  m.n_kv_heads = 2;
  m.head_dim = 8;
  m.element_type = 1;
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  Bytes bytes(data + 1, data + size);
  if (data[0] & 1) kvstash::fuzz::fix_chunk_checksums(bytes);

  (void)kvstash::cache::parse_chunk_header(bytes);
  kvstash::cache::ChunkError why = kvstash::cache::ChunkError::kNone;
  auto verified = kvstash::cache::verify_chunk(bytes, &why);
  (void)kvstash::cache::chunk_error_name(why);
  if (verified && verified->total_size() != bytes.size()) std::abort();

  static const ChunkMeta fixed = fixed_meta();
  (void)kvstash::cache::decode_chunk(bytes, fixed);
  auto header = kvstash::cache::parse_chunk_header(bytes);
  if (!header) return 0;
  auto view = kvstash::cache::decode_chunk(bytes, header->meta, &why);
  if (!view) return 0;
  if (!verified || view->payload.size() != view->header.payload_size) std::abort();
  // A version-1 chunk has no provenance (trust unknown), which no writer may write: encode refuses
  // it by design, so only provenance-bearing metas must encode again.
  if (view->header.meta.provenance.trust == kvstash::cache::ChunkTrust::kUnknown) return 0;
  kvstash::cache::EncodeOptions options;
  options.compress = view->header.compressed();
  auto again = kvstash::cache::encode_chunk(view->header.meta, view->payload, options);
  if (!again) std::abort();  // a meta that decoded always encodes
  auto round = kvstash::cache::decode_chunk(*again, view->header.meta);
  if (!round || round->payload.size() != view->payload.size() ||
      (!view->payload.empty() && std::memcmp(round->payload.data(), view->payload.data(), view->payload.size()) != 0)) {
    std::abort();
  }
  return 0;
}
