// For tests: runs the built `kvstash` binary (KVSTASH_BINARY_DIR/kvstash) with arguments and
// collects what it printed (stdout and stderr together).
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace kvstash::testing {

// Runs `kvstash ARGS 2>&1`; returns the exit code (-1 when it did not exit normally) and appends
// the output to `output`.
inline int run_kvstash(const std::string& args, std::string& output) {
  const std::string cmd = std::string(KVSTASH_BINARY_DIR) + "/kvstash " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) output.append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace kvstash::testing
