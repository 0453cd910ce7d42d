// GPT-2's reversible byte <-> unicode mapping: byte-level BPE vocabularies store each token's
// bytes as printable unicode chars, one per byte (a space is 'Ġ' U+0120, a newline 'Ċ' U+010A).
//
// The printable bytes '!'..'~', '¡'..'¬' and '®'..'ÿ' map to the code point of the same number;
// the other 68 bytes map, in increasing order, to U+0100, U+0101, ... (so all 256 bytes land
// below U+0144).
//
// Thread safety: the tables are built once (thread-safe static init) and never change.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvstash::tokenizer {

// The code point that stands for `byte`.
char32_t byte_to_unicode(std::uint8_t byte);
// The byte a code point stands for, or -1 when it stands for none.
int unicode_to_byte(char32_t cp);

// Raw bytes to their mapped UTF-8 text (each byte becomes one 1- or 2-byte UTF-8 char).
std::string bytes_to_mapped(std::string_view bytes);
// Mapped UTF-8 text back to raw bytes. Returns false (and leaves *out partly written) if a
// char is not one of the 256 mapped chars or the text is not valid UTF-8.
bool mapped_to_bytes(std::string_view mapped, std::string* out);

}  // namespace kvstash::tokenizer
