// UTF-8 checks for text that crosses the API: model output is raw bytes (a token may hold part
// of a character, or a small random model may emit bytes that never form one), while JSON must
// carry valid UTF-8.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvstash::server {

// Length of the valid UTF-8 sequence starting at s[0] (1..4), or 0 when s[0] does not start
// one (bad lead byte, bad continuation, overlong form, surrogate, > U+10FFFF), or -1 when the
// bytes so far are a valid start but s ends before the sequence does.
int utf8_sequence_length(std::string_view s);

bool is_valid_utf8(std::string_view s);

// Moves the longest prefix of `raw` that can be decided now into the result, replacing each
// invalid byte with U+FFFD, and leaves in `raw` only a trailing incomplete-but-valid sequence
// (at most 3 bytes). With `final`, that tail is replaced with U+FFFD too and raw ends empty.
std::string take_utf8(std::string& raw, bool final);

}  // namespace kvstash::server
