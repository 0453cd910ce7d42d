#include "cache/log.h"

#include <cstdio>
#include <mutex>
#include <string>

namespace kvstash::cache {

namespace {
void write_line(std::string_view message) {
  static std::mutex mu;
  std::string line = "kvstash cache: " + std::string(message) + "\n";
  std::lock_guard lock(mu);
  std::fputs(line.c_str(), stderr);
}
}  // namespace

void log_warning(std::string_view message) { write_line(message); }
void log_info(std::string_view message) { write_line(message); }

}  // namespace kvstash::cache
