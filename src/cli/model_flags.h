// Model loading flags shared by `kvstash run`, `serve`, `bench-engine` and `bench-cache`.
#pragma once

#include <CLI/CLI.hpp>

#include "model/model.h"

namespace kvstash::cli {

inline void add_model_load_flags(CLI::App& app, ModelLoadOptions& o) {
  app.add_flag(
      "--mmap-weights", [&o](std::int64_t) { o.weights = WeightMemory::kFileMapping; },
      "run the weights in place from the file mapping (4 KiB pages, no copy) instead of copying them at load "
      "into huge-page memory (the default: faster decode, costs the weights' size in private memory)");
}

}  // namespace kvstash::cli
