// Log lines to stderr, each prefixed with a UTC timestamp ("2025-01-31T12:00:00.123Z").
//
// Thread safety: log_line() may be called from any thread; a mutex keeps lines whole.
#pragma once

#include <string_view>

namespace kvstash::server {

void log_line(std::string_view message);

}  // namespace kvstash::server
