// `kvstash gen-model`: writes a synthetic GGUF model with random weights (see modelgen/modelgen.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "modelgen/modelgen.h"
#include "modelgen/quant_recipe.h"

namespace kvstash::cli {
namespace {

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : sep) + s;
  return out;
}

// Above this many bytes a model takes long enough to write that progress is worth printing.
constexpr std::uint64_t kProgressBytes = 64ull << 20;

}  // namespace

int gen_model_main(int argc, char** argv) {
  CLI::App app("Write a standard GGUF v3 model with random weights in the shapes of a real model.\n"
               "Presets: " + join(modelgen::preset_names(), ", "),
               "kvstash gen-model");
  modelgen::GenerateOptions options;
  std::string type_name = "f16";
  bool describe_only = false;
  app.add_option("--preset", options.preset, "Model shape: " + join(modelgen::preset_names(), ", "))
      ->required()
      ->check(CLI::IsMember(modelgen::preset_names()));
  app.add_option("--type", type_name,
                 "Type of the weight matrices (norms and biases stay f32): f32, f16, bf16, q8_0, or a quantization "
                 "scheme with its per-tensor mixture (" + join(modelgen::quant_scheme_names(), ", ") + ")")
      ->check(CLI::IsMember(modelgen::quant_scheme_names()))
      ->capture_default_str();
  app.add_option("--vocab", options.vocab_path,
                 "A vocabulary GGUF (e.g. ggml-vocab-qwen2.gguf) whose tokenizer.* keys are copied; "
                 "default: a small built-in byte-level BPE vocabulary");
  app.add_option("--seed", options.seed, "Random seed; with a tensor's name it fixes every value")->capture_default_str();
  app.add_option("--out", options.out_path, "The .gguf file to write");
  app.add_option("--qk-concentration", options.qk_concentration,
                 "Standard deviation of the Q/K biases (qwen2 shapes; default 0.1): larger values cluster each head's "
                 "pre-RoPE queries and keys around a non-zero centre, as in trained models")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--describe", describe_only, "Print the tensors and sizes; write nothing");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help is a "parse error" with exit code 0; every real error exits 1.
    return app.exit(e) == 0 ? 0 : 1;
  }
  if (!describe_only && options.out_path.empty()) {
    std::fprintf(stderr, "gen-model: --out is required\n");
    return 1;
  }
  const std::map<std::string, gguf::TensorType> types = {{"f32", gguf::TensorType::kF32},
                                                         {"f16", gguf::TensorType::kF16},
                                                         {"bf16", gguf::TensorType::kBF16},
                                                         {"q8_0", gguf::TensorType::kQ8_0}};
  if (types.count(type_name) != 0) {
    options.type = types.at(type_name);  // every matrix in this type, as before the schemes
  } else {
    options.scheme = type_name;  // per-tensor types from the scheme's recipe
  }

  auto plan = modelgen::describe_model(options);
  if (!plan) {
    std::fprintf(stderr, "gen-model: %s\n", plan.status().to_string().c_str());
    return 1;
  }
  if (!plan->note.empty()) std::fprintf(stderr, "gen-model: %s\n", plan->note.c_str());
  std::fprintf(stderr, "gen-model: %s (%s), %llu parameters, %.1f MiB of %s weights, vocabulary %llu\n",
               plan->preset.name.c_str(), plan->preset.arch.c_str(), static_cast<unsigned long long>(plan->n_params),
               static_cast<double>(plan->n_bytes) / (1 << 20), type_name.c_str(),
               static_cast<unsigned long long>(plan->preset.n_vocab));
  if (describe_only) {
    for (const modelgen::TensorPlan& t : plan->tensors) {
      std::string dims;
      for (std::uint64_t d : t.dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      std::printf("%-28s %-5s [%s]\n", t.name.c_str(), gguf::tensor_type_name(t.type).c_str(), dims.c_str());
    }
    return 0;
  }
  if (plan->n_bytes >= kProgressBytes) {
    options.progress = [](const std::string& line) { std::fprintf(stderr, "gen-model: %s\n", line.c_str()); };
  }
  Status st = modelgen::generate_model(options);
  if (!st.is_ok()) {
    std::fprintf(stderr, "gen-model: %s\n", st.to_string().c_str());
    return 1;
  }
  std::fprintf(stderr, "gen-model: wrote %s\n", options.out_path.c_str());
  return 0;
}

}  // namespace kvstash::cli
