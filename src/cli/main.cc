// kvstash: one binary, one subcommand per job.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

namespace {

struct Command {
  const char* name;
  int (*main)(int, char**);
  const char* summary;
};

const Command kCommands[] = {
    {"serve", kvstash::cli::serve_main, "OpenAI-compatible server with continuous batching and KV caching"},
    {"route", kvstash::cli::route_main, "cache-aware router: each request to the serve worker that holds its prefix"},
    {"run", kvstash::cli::run_main, "generate text from a prompt and print timings"},
    {"tokenize", kvstash::cli::tokenize_main, "print the token ids of stdin's text"},
    {"gen-model", kvstash::cli::gen_model_main, "write a GGUF model with random weights in a real model's shapes"},
    {"quantize", kvstash::cli::quantize_main, "convert an f32/f16/bf16 GGUF model to q4_k_m, q6_k, q8_0, ..."},
    {"bench-engine", kvstash::cli::bench_engine_main, "engine prefill/decode speed against the machine's GEMM peak and memory bandwidth"},
    {"bench", kvstash::cli::bench_main, "benchmark any OpenAI-compatible server (TTFT, ITL, TPOT, cache hit rate)"},
    {"cache", kvstash::cli::cache_main, "inspect, verify or clear a KV chunk store"},
    {"bench-cache", kvstash::cli::bench_cache_main, "TTFT with a prompt's prefix served from each KV store tier, vs cold"},
    {"peers", kvstash::cli::peers_main, "a running node's identity, DHT neighbours and trust list (peer sharing)"},
};

void usage(FILE* out) {
  std::fprintf(out, "kvstash — an LLM serving stack that never prefills the same tokens twice\n\n"
                    "usage: kvstash <command> [options]   (kvstash <command> --help for its options)\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(out, "  %-13s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 1 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    std::printf("kvstash 0.1.0\n");
    return 0;
  }
  for (const Command& c : kCommands) {
    if (argv[1] == std::string(c.name)) return c.main(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "kvstash: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return 1;
}
