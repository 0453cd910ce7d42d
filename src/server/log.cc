#include "server/log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace kvstash::server {

void log_line(std::string_view message) {
  static std::mutex mutex;
  auto now = std::chrono::system_clock::now();
  std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "%s.%03dZ %.*s\n", stamp, static_cast<int>(millis), static_cast<int>(message.size()),
               message.data());
}

}  // namespace kvstash::server
