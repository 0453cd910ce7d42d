// kvstash bench-engine: the engine's prefill and decode speed, beside the machine's own limits
// measured in the same run — OpenBLAS sgemm FLOP/s on the model's matmul shapes and the memory
// read bandwidth of a streaming read with all cores — so the ratios mean the same on any machine.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <vector>

#include "cli/bench_engine_budget.h"
#include "cli/bench_engine_spec.h"
#include "cli/bench_engine_window.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/kv_budget_flags.h"
#include "cli/speculative_flags.h"
#include "engine/block_pool.h"
#include "engine/draft_model.h"
#include "engine/speculative.h"
#include "kernels/machine_limits.h"
#include "kernels/simd_dispatch.h"
#include "model/model.h"

namespace kvstash::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Runner {
  const Model& model;
  BlockPool pool;
  ThreadPool& threads;
  std::vector<std::vector<std::int32_t>> tables;
  std::vector<float> logits;
  ForwardProfile* profile = nullptr;  // when set, each step's phases are added to it

  Runner(const Model& m, int n_seqs, int max_tokens, ThreadPool& t)
      : model(m), pool(m.config(), 16, static_cast<std::int64_t>(n_seqs) * (max_tokens / 16 + 1)), threads(t) {
    for (int s = 0; s < n_seqs; ++s) {
      tables.emplace_back();
      for (int b = 0; b * 16 < max_tokens; ++b) tables.back().push_back(*pool.allocate());
    }
  }
  // One forward pass: n_new tokens for each of the first n_seqs sequences at position pos.
  double step(int n_seqs, int pos, int n_new) {
    ForwardBatch batch;
    const int nv = model.config().n_vocab;
    for (int s = 0; s < n_seqs; ++s) {
      for (int i = 0; i < n_new; ++i) batch.tokens.push_back(static_cast<TokenId>((pos + i) * 7919 % nv + s) % nv);
      const auto& table = tables[static_cast<std::size_t>(s)];
      batch.sequences.push_back({table.data(), static_cast<int>(table.size()), pos, n_new, true, false});
    }
    batch.profile = profile;
    logits.resize(static_cast<std::size_t>(batch.logit_rows()) * nv);
    auto t0 = Clock::now();
    if (Status st = model.forward(batch, pool.view(), logits.data(), threads); !st) {
      std::fprintf(stderr, "kvstash bench-engine: %s\n", st.to_string().c_str());
      std::exit(1);
    }
    return seconds_since(t0);
  }
};

// One layer's matmuls as a token runs them: rows x cols, `count` of that shape. A MoE layer's are
// its router and the n_used experts a token runs (gate and up, then down), not all of them.
struct MatmulShape {
  std::int64_t rows, cols, count;
};
std::vector<MatmulShape> layer_shapes(const ModelConfig& c, const LayerSpec& spec) {
  const std::int64_t q_dim = std::int64_t{c.n_heads} * c.head_dim, d = c.n_embd;
  std::vector<MatmulShape> shapes = {{q_dim, d, 1}, {c.kv_row_elems(), d, 2}, {d, q_dim, 1}};
  if (spec.ffn.kind == FfnKind::kMoe) {
    const MoeSpec& m = spec.ffn.moe;
    shapes.push_back({m.n_experts, d, 1});
    shapes.push_back({m.n_ff_expert, d, 2 * std::int64_t{m.n_used}});
    shapes.push_back({d, m.n_ff_expert, m.n_used});
  } else {
    shapes.push_back({spec.ffn.n_ff, d, 2});
    shapes.push_back({d, spec.ffn.n_ff, 1});
  }
  return shapes;
}

// Multiply-adds (x2: FLOPs) of a prefill of `tokens`: every layer's matmuls for every token, the
// output projection for the last one, and causal attention (QK^T and PV).
double prefill_flop_count(const ModelConfig& c, int tokens) {
  double layer_macs = 0;
  for (const LayerSpec& spec : c.layers) {
    for (const MatmulShape& s : layer_shapes(c, spec)) layer_macs += static_cast<double>(s.rows * s.cols * s.count);
  }
  const double attn_flops = 4.0 * c.n_layers * c.n_heads * c.head_dim * (tokens * (tokens + 1) / 2.0);
  return 2.0 * layer_macs * tokens + 2.0 * c.n_vocab * c.n_embd + attn_flops;
}

// The first MoE layer's spec, or nullptr for a dense model.
const MoeSpec* first_moe(const ModelConfig& c) {
  for (const LayerSpec& spec : c.layers) {
    if (spec.ffn.kind == FfnKind::kMoe) return &spec.ffn.moe;
  }
  return nullptr;
}

}  // namespace

int bench_engine_main(int argc, char** argv) {
  CLI::App app{"Measure prefill and decode speed of a model against this machine's GEMM peak and memory bandwidth.",
               "kvstash bench-engine"};
  std::string model_path;
  int prompt_tokens = 512, decode_tokens = 32, decode_context = 64, batch = 8, repeats = 3, n_threads = 0;
  int prefill_context = 0, prefill_step = 64, prefill_min_tokens = 0;
  bool json = false, step_profile = false, window_kv = false;
  int window_turns = 8;
  app.add_option("-m,--model", model_path, "GGUF model file")->required();
  app.add_option("--prompt-tokens", prompt_tokens, "prefill length")->capture_default_str();
  app.add_option("--decode-tokens", decode_tokens, "decode steps timed per batch size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--decode-context", decode_context,
                 "tokens already in each sequence when decode starts (attention reads them every step)")
      ->capture_default_str();
  app.add_option("--batch", batch, "the second decode batch size (sequences decoded together)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--prefill-context", prefill_context,
                 "also time a --prefill-step-token prefill after this many cached tokens, against the cold "
                 "prefill of the whole context (0 = skip)")
      ->capture_default_str();
  app.add_option("--prefill-step", prefill_step, "new tokens of the --prefill-context step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--prefill-min-tokens", prefill_min_tokens,
                 "matmuls of this many tokens or more take the sgemm path (0 = the default: never; a token's result then depends on its batch)")
      ->capture_default_str();
  app.add_option("--repeats", repeats, "best of this many prefill runs")->capture_default_str();
  app.add_option("-t,--threads", n_threads, "threads; 0 = all cores")->capture_default_str();
  app.add_flag("--json", json, "print one JSON object instead of a table");
  app.add_flag("--step-profile", step_profile,
               "also time batch-1 decode phase by phase (projections, attention, norms, ...): each phase's share "
               "of the step and its weights' read rate");
  app.add_flag("--window-kv", window_kv,
               "measure only this: the peak KV a conversation of --prompt-tokens new tokens in --window-turns turns "
               "(each generating --decode-tokens) holds on a model with sliding-window layers, with their KV freed "
               "against kept (all-global), and that both give the same greedy output");
  app.add_option("--window-turns", window_turns, "turns of the --window-kv conversation")->capture_default_str();
  KvBudgetOptions kv_budget;
  add_kv_budget_flags(app, kv_budget);
  app.get_option("--kv-budget")
      ->description("measure only this: decode tokens/s after --decode-context tokens with this KV budget against "
                    "full attention, over one shared prefill, --decode-tokens steps each (0 = off: the usual figures)");
  SpeculativeOptions speculative;
  std::string model_draft;
  add_speculative_flags(app, speculative, model_draft);
  static const std::map<std::string, DraftKind> drafters = {
      {"off", DraftKind::kNone}, {"ngram", DraftKind::kNgram}, {"model", DraftKind::kModel}};
  app.add_option("--draft", speculative.draft,
                 "measure only this: batch-1 decode tokens/s with this drafter (ngram, or model with --model-draft) "
                 "against plain decoding, on a copying and a no-acceptance workload, --decode-tokens tokens each, best "
                 "of --repeats (same as --spec)")
      ->transform(CLI::CheckedTransformer(drafters, CLI::ignore_case));
  std::string spec_passage;
  app.add_option("--draft-passage", spec_passage,
                 "with --draft: the passage the greedy and copying workloads start from (default: a built-in one)");
  ModelLoadOptions model_load;
  add_model_load_flags(app, model_load);
  CLI11_PARSE(app, argc, argv);
  if (speculative.draft != DraftKind::kNone && kv_budget.budget > 0) {
    std::fprintf(stderr, "kvstash bench-engine: --draft and --kv-budget each select a measurement of their own; give one\n");
    return 1;
  }
  if (speculative.draft != DraftKind::kNone && repeats < 1) {
    std::fprintf(stderr, "kvstash bench-engine: --repeats must be at least 1\n");
    return 1;
  }

  kernels::set_prefill_min_tokens_for_testing(prefill_min_tokens);
  auto loaded = Model::load(model_path, model_load);
  if (!loaded) {
    std::fprintf(stderr, "kvstash bench-engine: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  const Model& model = **loaded;
  std::unique_ptr<Model> draft_model;
  if (Status st = load_draft_model(model_draft, model_load, speculative, draft_model); !st) {
    std::fprintf(stderr, "kvstash bench-engine: %s\n", st.to_string().c_str());
    return 1;
  }
  if (speculative.draft == DraftKind::kModel) {
    if (Status st = check_same_vocabulary(model, *draft_model); !st) {
      std::fprintf(stderr, "kvstash bench-engine: %s\n", st.to_string().c_str());
      return 1;
    }
  }
  const ModelConfig& c = model.config();
  ThreadPool threads(n_threads);
  if (window_kv) return bench_engine_window(model, prompt_tokens, window_turns, decode_tokens, threads.size(), json);
  if (kv_budget.budget > 0) return bench_engine_budget(model, kv_budget, decode_context, decode_tokens, json, threads);
  if (speculative.draft != DraftKind::kNone) {
    if (Status st = validate_speculative(speculative); !st) {
      std::fprintf(stderr, "kvstash bench-engine: %s\n", st.to_string().c_str());
      return 1;
    }
    return bench_engine_spec(model, speculative, decode_tokens, repeats, threads.size(), json, spec_passage);
  }
  auto progress = [&](const char* what) { if (!json) std::fprintf(stderr, "… %s\n", what); };

  // Prefill: best of `repeats` passes over a fresh prompt.
  progress("prefill");
  double prefill_s = 1e30;
  for (int r = 0; r < repeats; ++r) {
    Runner run(model, 1, prompt_tokens, threads);
    prefill_s = std::min(prefill_s, run.step(1, 0, prompt_tokens));
  }
  // Decode at batch 1 and 8, after a prompt of decode_context tokens: median time per step (a
  // step that another process delays moves a mean, not a median).
  // The fastest step too: the streaming-read and sgemm limits are best-of figures, so on a loaded
  // machine "best step / best read" compares like with like where the median does not.
  // `after_step`, when given, runs after each timed step with that step's seconds (not timed);
  // `profile`, when given, collects the timed steps' phases.
  auto decode = [&](int batch, const std::function<void(double)>& after_step = {}, ForwardProfile* profile = nullptr) {
    Runner run(model, batch, decode_context + decode_tokens + 1, threads);
    run.step(batch, 0, decode_context);
    run.profile = profile;
    std::vector<double> steps;
    for (int i = 0; i < decode_tokens; ++i) {
      steps.push_back(run.step(batch, decode_context + i, 1));
      if (after_step) after_step(steps.back());
    }
    return steps;
  };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  progress("decode, batch 1");
  const std::vector<double> decode1_steps = decode(1);
  const double decode1_s = median(decode1_steps);
  const double decode1_best_s = *std::min_element(decode1_steps.begin(), decode1_steps.end());
  const kernels::StreamMemory stream_memory =
      model_load.weights == WeightMemory::kHugePages ? kernels::StreamMemory::kHugePages : kernels::StreamMemory::kSmallPages;
  const double bytes_per_token = static_cast<double>(model.weight_bytes_per_token());
  // Batch 1 again, each step paired with a streaming read right after it, over the very pages the
  // step read (the weights' memory; a buffer of as many bytes where the weights stay on the file
  // mapping): per pair, the step's weight read rate over the read's, and the median of those.
  // Both meet the same physical pages and, a few milliseconds apart, the same state of the machine,
  // which the best-of read of a fresh buffer below does not: on this project's 2-vCPU VMs two
  // threads read memory at ~31 or at ~62 GB/s from one second to the next while one thread reads
  // ~30 throughout (the two vCPUs at times share one core's memory bandwidth; `kernels_bench
  // --read-trace`, BENCHMARKS.md, issue 14).
  progress("decode, batch 1, each step paired with a streaming read of the weights");
  const std::span<const std::uint8_t> weight_memory = model.weight_memory();
  std::optional<kernels::StreamReader> reader;
  if (weight_memory.empty()) reader.emplace(threads, static_cast<std::size_t>(bytes_per_token), stream_memory);
  auto read_pass = [&] {
    return reader ? reader->pass_gbs() : kernels::stream_read_pass_gbs(threads, weight_memory.data(), weight_memory.size());
  };
  std::vector<double> ratios, passes;
  decode(1, [&](double step_s) {
    const double pass = read_pass();
    passes.push_back(pass);
    if (pass > 0) ratios.push_back(bytes_per_token / step_s / 1e9 / pass);
  });
  const double paired_ratio = median(ratios), paired_stream_gbs = median(passes);
  const double weights_read_best_gbs = passes.empty() ? 0.0 : *std::max_element(passes.begin(), passes.end());
  progress("decode, batch N");
  const double decode_batch_s = median(decode(batch));
  // Batch 1 once more, phase by phase: where a step's time goes beside the weight read.
  struct PhaseRow {
    const char* name;
    double us_per_step, share, weight_bytes_per_step, read_gbs;  // the last two 0 without weights
  };
  std::vector<PhaseRow> phase_rows;
  double profiled_ms_per_step = 0;
  std::int64_t profiled_steps = 0;
  if (step_profile) {
    progress("decode, batch 1, phase by phase");
    ForwardProfile profile;
    const std::vector<double> steps = decode(1, {}, &profile);
    const double profiled_s = std::accumulate(steps.begin(), steps.end(), 0.0);
    profiled_steps = profile.passes;
    const double n = static_cast<double>(profile.passes);
    profiled_ms_per_step = 1e3 * profiled_s / n;
    for (int p = 0; p < ForwardProfile::kPhases; ++p) {
      const double s_per_step = profile.seconds[p] / n, bytes = static_cast<double>(profile.weight_bytes[p]) / n;
      phase_rows.push_back({ForwardProfile::name(p), 1e6 * s_per_step, profile.seconds[p] / profiled_s, bytes,
                            bytes > 0 && s_per_step > 0 ? bytes / s_per_step / 1e9 : 0.0});
    }
  }

  // A short prefill against a long cached context (a prefix-cache hit): one cold prefill of
  // context + step tokens, then the last `step` tokens again at their own positions, which sees
  // exactly the KV a cache hit would restore. Median of `repeats` steps; the cold pass runs once
  // (tens of seconds at 4k tokens on 2 cores).
  double cold_prefill_s = 0, context_step_s = 0;
  if (prefill_context > 0) {
    progress("cold prefill of the context, then the short step after it");
    const int total = prefill_context + prefill_step;
    Runner run(model, 1, total, threads);
    cold_prefill_s = run.step(1, 0, total);
    std::vector<double> steps;
    for (int r = 0; r < std::max(1, repeats); ++r) steps.push_back(run.step(1, prefill_context, prefill_step));
    std::sort(steps.begin(), steps.end());
    context_step_s = steps[steps.size() / 2];
  }

  // The machine's limits, measured now. sgemm on each distinct matmul shape of one layer at the
  // prefill length, combined by time (total FLOPs / total seconds), as the layer runs them.
  progress("OpenBLAS sgemm on the model's shapes");
  double gemm_flops = 0, gemm_s = 0;
  for (const MatmulShape& s : layer_shapes(c, c.layers.front())) {
    const double gflops = kernels::measure_gemm_gflops(prompt_tokens, static_cast<int>(s.rows), static_cast<int>(s.cols), threads);
    const double flops = 2.0 * prompt_tokens * s.rows * s.cols * s.count;
    gemm_flops += flops;
    gemm_s += flops / (gflops * 1e9);
  }
  const double gemm_peak_gflops = gemm_flops / gemm_s / 1e9;
  progress("streaming read bandwidth");
  const double stream_gbs = kernels::measure_stream_read_gbs(threads, kernels::kStreamBufferBytes, stream_memory);

  // What the engine achieved in the same units.
  const double prefill_flops = prefill_flop_count(c, prompt_tokens);
  const double prefill_gflops = prefill_flops / prefill_s / 1e9;
  const double decode_gbs = bytes_per_token / decode1_s / 1e9;

  nlohmann::json out = {
      {"model", c.name},
      {"architecture", c.architecture},
      {"simd", kernels::simd_path()},
      {"threads", threads.size()},
      {"prompt_tokens", prompt_tokens},
      {"decode_context", decode_context},
      {"prefill_tokens_per_s", prompt_tokens / prefill_s},
      {"prefill_gflops", prefill_gflops},
      {"decode_tokens_per_s", 1.0 / decode1_s},
      {"decode_step_mean_s", std::accumulate(decode1_steps.begin(), decode1_steps.end(), 0.0) / static_cast<double>(decode1_steps.size())},
      {"decode_batch", batch},
      {"decode_batch8_tokens_per_s", batch / decode_batch_s},  // name kept; the batch is decode_batch
      {"decode_weight_read_gbs", decode_gbs},
      {"weight_bytes_per_token", bytes_per_token},
      {"gemm_peak_gflops", gemm_peak_gflops},
      {"stream_read_gbs", stream_gbs},
      {"weight_memory", model.weight_memory_summary()},
      {"prefill_vs_gemm_peak", prefill_gflops / gemm_peak_gflops},
      {"decode_vs_stream_read", decode_gbs / stream_gbs},
      {"decode_best_step_vs_stream_read", bytes_per_token / decode1_best_s / 1e9 / stream_gbs},
      {"stream_read_paired_gbs", paired_stream_gbs},
      {"stream_read_paired_over", reader ? "a buffer of the step's bytes" : "the weights' memory"},
      {"weights_read_best_gbs", weights_read_best_gbs},
      {"decode_vs_stream_read_paired", paired_ratio},
      {"decode_vs_weights_read_best", decode_gbs / weights_read_best_gbs},
  };
  const MoeSpec* moe = first_moe(c);
  std::uint64_t file_weight_bytes = 0;
  for (const gguf::TensorInfo& t : model.file().tensors()) file_weight_bytes += t.n_bytes;
  if (moe != nullptr) {
    // weight_bytes_per_token and the decode rates above are of these active bytes.
    out["moe"] = {{"experts", moe->n_experts},
                  {"experts_used", moe->n_used},
                  {"active_weight_bytes_per_token", bytes_per_token},
                  {"file_weight_bytes", file_weight_bytes}};
  }
  if (step_profile) {
    nlohmann::json phases = nlohmann::json::array();
    for (const PhaseRow& row : phase_rows) {
      nlohmann::json phase = {{"phase", row.name}, {"us_per_step", row.us_per_step}, {"share_of_step", row.share}};
      if (row.read_gbs > 0) {
        phase["weight_bytes_per_step"] = row.weight_bytes_per_step;
        phase["read_gbs"] = row.read_gbs;
        phase["read_vs_stream_read_paired"] = row.read_gbs / paired_stream_gbs;
      }
      phases.push_back(phase);
    }
    out["step_profile"] = {{"steps", profiled_steps}, {"ms_per_step", profiled_ms_per_step}, {"phases", phases}};
  }
  if (prefill_context > 0) {
    out["prefill_context"] = prefill_context;
    out["prefill_step_tokens"] = prefill_step;
    out["cold_prefill_s"] = cold_prefill_s;
    out["context_step_s"] = context_step_s;
    out["context_step_vs_cold_prefill"] = context_step_s / cold_prefill_s;
  }
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("model %s (%s), %s, %d threads\n", c.name.c_str(), c.architecture.c_str(), kernels::simd_path(), threads.size());
  std::printf("  %s; the streaming read runs over the same kind of memory\n", model.weight_memory_summary().c_str());
  if (moe != nullptr) {
    std::printf("  MoE, %d experts, %d used: a decode step reads %.1f MB of active weights (attention, routers, the "
                "experts its token picked, output) of the file's %.1f MB; the decode GB/s below are of the active bytes\n",
                moe->n_experts, moe->n_used, bytes_per_token / 1e6, static_cast<double>(file_weight_bytes) / 1e6);
  }
  std::printf("  prefill  %5d tokens   %9.1f tokens/s   %7.1f GFLOP/s   = %5.1f%% of OpenBLAS sgemm peak (%.1f GFLOP/s)\n",
              prompt_tokens, prompt_tokens / prefill_s, prefill_gflops, 100 * prefill_gflops / gemm_peak_gflops, gemm_peak_gflops);
  std::printf("  decode   after %d tokens of context, median of %d steps\n", decode_context, decode_tokens);
  std::printf("  decode   batch 1      %9.1f tokens/s   %7.2f GB/s%s = %5.1f%% of streaming read (%.2f GB/s)\n",
              1.0 / decode1_s, decode_gbs, moe != nullptr ? " active" : "     ", 100 * decode_gbs / stream_gbs, stream_gbs);
  std::printf("  decode   batch 1, fastest step: %.2f GB/s = %5.1f%% of streaming read\n",
              bytes_per_token / decode1_best_s / 1e9, 100 * bytes_per_token / decode1_best_s / 1e9 / stream_gbs);
  std::printf("  decode   batch 1, each step over a streaming read of %s right after it: median %5.1f%% "
              "(median read %.2f GB/s, fastest %.2f GB/s)\n",
              reader ? "a buffer of its bytes" : "the weights' memory", 100 * paired_ratio, paired_stream_gbs, weights_read_best_gbs);
  std::printf("  decode   batch %-2d     %9.1f tokens/s   (%.2fx batch 1)\n", batch, batch / decode_batch_s,
              decode1_s * batch / decode_batch_s);
  if (step_profile) {
    std::printf("  decode   batch 1 phase by phase, mean of %lld steps: %.2f ms per step; read rates over the paired read (%.2f GB/s)\n",
                static_cast<long long>(profiled_steps), profiled_ms_per_step, paired_stream_gbs);
    std::printf("           %-14s %9s %7s %10s %8s %8s\n", "phase", "us/step", "share", "weights MB", "GB/s", "of read");
    for (const PhaseRow& row : phase_rows) {
      std::printf("           %-14s %9.1f %6.1f%%", row.name, row.us_per_step, 100 * row.share);
      if (row.read_gbs > 0) std::printf(" %10.2f %8.2f %7.1f%%", row.weight_bytes_per_step / 1e6, row.read_gbs, 100 * row.read_gbs / paired_stream_gbs);
      std::printf("\n");
    }
  }
  if (prefill_context > 0) {
    std::printf("  prefill  %d tokens after %d cached: %.1f ms = %.2f%% of the cold %d-token prefill (%.0f ms)\n",
                prefill_step, prefill_context, 1e3 * context_step_s, 100 * context_step_s / cold_prefill_s,
                prefill_context + prefill_step, 1e3 * cold_prefill_s);
  }
  return 0;
}

}  // namespace kvstash::cli
