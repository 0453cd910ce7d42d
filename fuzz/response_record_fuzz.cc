// Fuzzes the response-record reader (decode_response_record): records come from every tier and
// from peers (/v1/kv/responses/). A record that decodes must encode again, and that encoding must
// decode to a record whose encoding is byte for byte the same (the encoding is canonical, so the
// output hash a signature covers is a function of the record's content). The output hash and the
// signed message are computed for it as the response cache does before checking the signature.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "cache/response_record.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvstash::cache::RecordError why = kvstash::cache::RecordError::kNone;
  auto record = kvstash::cache::decode_response_record(std::span<const std::uint8_t>(data, size), &why);
  (void)kvstash::cache::record_error_name(why);
  if (!record) {
    if (why == kvstash::cache::RecordError::kNone) std::abort();  // a failure always says why
    return 0;
  }
  (void)kvstash::cache::output_hash(*record);
  (void)kvstash::cache::signed_message(*record);
  auto encoded = kvstash::cache::encode_response_record(*record);
  if (!encoded) std::abort();
  auto again = kvstash::cache::decode_response_record(*encoded);
  if (!again) std::abort();
  auto encoded_again = kvstash::cache::encode_response_record(*again);
  if (!encoded_again || *encoded_again != *encoded) std::abort();
  if (kvstash::cache::output_hash(*again) != kvstash::cache::output_hash(*record)) std::abort();
  return 0;
}
