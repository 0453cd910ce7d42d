// Warnings from the cache module, one line each on stderr ("kvstash cache: ...").
//
// The tiers log a fault once when it starts (disk full, redis unreachable) and once when it
// clears; counting every occurrence is the job of TierStats, not of the log.
//
// Thread safety: safe from any thread; lines are not interleaved.
#pragma once

#include <string_view>

namespace kvstash::cache {

void log_warning(std::string_view message);
// A one-time fact worth a line at startup (what a tier connected to).
void log_info(std::string_view message);

}  // namespace kvstash::cache
