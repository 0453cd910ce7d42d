// `kvstash quantize IN.gguf OUT.gguf TYPE`: converts an f32/f16/bf16 model to a quantization scheme
// (modelgen/quantize_model.h; the mixtures are documented in modelgen/quant_recipe.h).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>

#include "cli/commands.h"
#include "modelgen/quantize_model.h"

namespace kvstash::cli {

int quantize_main(int argc, char** argv) {
  std::string names;
  for (const std::string& n : modelgen::quant_scheme_names()) names += (names.empty() ? "" : ", ") + n;
  CLI::App app("Convert an f32/f16/bf16 GGUF model to a quantized one, with llama.cpp's per-tensor mixtures "
               "for the _S/_M/_L types.\nTypes: " + names,
               "kvstash quantize");
  modelgen::QuantizeOptions options;
  int threads = 0;
  app.add_option("IN", options.in_path, "The model to convert")->required();
  app.add_option("OUT", options.out_path, "The file to write")->required();
  app.add_option("TYPE", options.scheme, "Quantization type: " + names)->required();
  app.add_option("--threads", threads, "Threads (0: one per core)")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;
  }
  options.progress = [](const std::string& line) { std::fprintf(stderr, "quantize: %s\n", line.c_str()); };
  ThreadPool pool(threads);
  const auto start = std::chrono::steady_clock::now();
  auto summary = modelgen::quantize_model(options, pool);
  if (!summary) {
    std::fprintf(stderr, "quantize: %s\n", summary.status().to_string().c_str());
    return 1;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "quantize: wrote %s: %d tensors converted, %d copied, %.1f MiB -> %.1f MiB in %.1f s\n",
               options.out_path.c_str(), summary->tensors_converted, summary->tensors_copied,
               static_cast<double>(summary->bytes_in) / (1 << 20), static_cast<double>(summary->bytes_out) / (1 << 20),
               seconds);
  return 0;
}

}  // namespace kvstash::cli
