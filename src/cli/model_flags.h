// Model loading flags shared by `kvstash run`, `serve`, `bench-engine` and `bench-cache`.
#pragma once

#include <CLI/CLI.hpp>

#include "model/model.h"
#include "model/weights_cache.h"

namespace kvstash::cli {

inline void add_model_load_flags(CLI::App& app, ModelLoadOptions& o) {
  app.add_flag(
      "--mmap-weights", [&o](std::int64_t) { o.weights = WeightMemory::kFileMapping; },
      "run the weights in place from the file mapping (4 KiB pages, no copy) instead of copying them at load "
      "into huge-page memory (the default: faster decode, costs the weights' size in private memory)");
  o.weights_cache_dir = default_weights_cache_dir().string();
  app.add_option_function<std::string>(
         "--weights-cache", [&o](const std::string& dir) { o.weights_cache_dir = dir == "off" ? "" : dir; },
         "directory of prepared weights (interleaved for this CPU's kernels), written at the first load of a model "
         "and read at later ones instead of preparing them again; 'off' disables it (default: "
         "$XDG_CACHE_HOME/kvstash/weights or ~/.cache/kvstash/weights)")
      ->type_name("DIR|off");
}

}  // namespace kvstash::cli
