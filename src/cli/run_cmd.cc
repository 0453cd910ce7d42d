// kvstash run: load a GGUF model, generate from one prompt, print the text and a timing line.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/kv_budget_flags.h"
#include "cli/speculative_flags.h"
#include "engine/engine.h"
#include "model/model.h"
#include "server/utf8.h"

namespace kvstash::cli {
int run_main(int argc, char** argv) {
  CLI::App app{"Generate text from a prompt with a GGUF model and print the timings.", "kvstash run"};
  std::string model_path, prompt;
  int n_predict = 64, n_ctx = 4096, n_threads = 0;
  SamplingParams sampling;
  bool no_bos = false, ignore_eos = false;
  app.add_option("-m,--model", model_path, "GGUF model file")->required();
  app.add_option("-p,--prompt", prompt, "prompt text (special tokens like <|im_start|> are parsed)")->required();
  app.add_option("-n,--n-predict", n_predict, "tokens to generate at most")->capture_default_str();
  app.add_option("--temp", sampling.temperature, "sampling temperature; 0 = greedy")->capture_default_str();
  app.add_option("--top-k", sampling.top_k, "keep the k most likely tokens; 0 = all")->capture_default_str();
  app.add_option("--top-p", sampling.top_p, "nucleus sampling mass")->capture_default_str();
  app.add_option("--seed", sampling.seed, "sampling seed")->capture_default_str();
  app.add_option("-c,--ctx", n_ctx, "context length in tokens")->capture_default_str();
  app.add_option("-t,--threads", n_threads, "threads; 0 = all cores")->capture_default_str();
  app.add_flag("--no-bos", no_bos, "do not start the prompt with BOS even if the model asks for it");
  app.add_flag("--ignore-eos", ignore_eos, "keep generating past end-of-generation tokens");
  KvBudgetOptions kv_budget;
  add_kv_budget_flags(app, kv_budget);
  SpeculativeOptions speculative;
  std::string model_draft;
  add_speculative_flags(app, speculative, model_draft);
  ModelLoadOptions model_load;
  add_model_load_flags(app, model_load);
  CLI11_PARSE(app, argc, argv);

  auto model = Model::load(model_path, model_load);
  if (!model) {
    std::fprintf(stderr, "kvstash run: %s\n", model.status().to_string().c_str());
    return 1;
  }
  std::unique_ptr<Model> draft_model;  // outlives the engine
  if (Status st = load_draft_model(model_draft, model_load, speculative, draft_model); !st) {
    std::fprintf(stderr, "kvstash run: %s\n", st.to_string().c_str());
    return 1;
  }
  const Tokenizer& tok = (*model)->tokenizer();
  GenerationRequest req;
  if (tok.add_bos() && tok.bos_id() >= 0 && !no_bos) req.prompt.push_back(tok.bos_id());
  auto ids = tok.encode(prompt, /*parse_special=*/true);
  req.prompt.insert(req.prompt.end(), ids.begin(), ids.end());
  req.sampling = sampling;
  req.stop_at_end_of_generation = !ignore_eos;
  n_ctx = std::min(n_ctx, (*model)->config().n_ctx_train);
  req.max_tokens = std::max(1, std::min(n_predict, n_ctx - static_cast<int>(req.prompt.size())));

  EngineOptions opts;
  opts.n_ctx = n_ctx;
  opts.max_running = 1;
  opts.n_threads = n_threads;
  opts.kv_pool_tokens = n_ctx;
  opts.prefill_chunk = n_ctx;
  opts.step_token_budget = n_ctx;
  opts.kv_budget = kv_budget;
  opts.speculative = speculative;
  auto engine = Engine::create(**model, opts);
  if (!engine) {
    std::fprintf(stderr, "kvstash run: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  std::string pending;
  std::int64_t max_blocks = 0;  // the sequence's KV blocks at most (published once per step)
  auto result = generate(**engine, std::move(req), [&](TokenId t) {
    if (kv_budget.budget > 0) max_blocks = std::max(max_blocks, (*engine)->stats().kv_blocks_used);
    // Tokens may end inside a UTF-8 character: print only what is complete.
    pending += tok.token_to_piece(t);
    const std::string ready = server::take_utf8(pending, /*final=*/false);
    std::fwrite(ready.data(), 1, ready.size(), stdout);
    std::fflush(stdout);
  });
  const std::string rest = server::take_utf8(pending, /*final=*/true);
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::printf("\n");
  std::fflush(stdout);  // the text before the timing line on stderr
  if (!result) {
    std::fprintf(stderr, "kvstash run: %s\n", result.status().to_string().c_str());
    return 1;
  }
  if (result->finish == FinishReason::kError) {
    std::fprintf(stderr, "kvstash run: %s\n", result->error.c_str());
    return 1;
  }
  const int n_gen = static_cast<int>(result->tokens.size());
  const double decode_s = result->total_s - result->ttft_s;
  std::fprintf(stderr,
               "prompt: %d tokens | prefill: %.1f tokens/s | decode: %.1f tokens/s (%d tokens) | "
               "time to first token: %.1f ms\n",
               result->prompt_tokens, result->prompt_tokens / std::max(result->ttft_s, 1e-9),
               n_gen > 1 ? (n_gen - 1) / std::max(decode_s, 1e-9) : 0.0, n_gen, result->ttft_s * 1e3);
  if (speculative.draft != DraftKind::kNone) {
    const EngineStats st = (*engine)->stats();
    std::fprintf(stderr, "speculative: %lld drafts, %lld of %lld drafted tokens accepted (%.0f%%, %.2f per draft), %.1f ms drafting\n",
                 static_cast<long long>(st.drafts), static_cast<long long>(st.draft_tokens_accepted),
                 static_cast<long long>(st.draft_tokens),
                 st.draft_tokens > 0 ? 100.0 * static_cast<double>(st.draft_tokens_accepted) / static_cast<double>(st.draft_tokens) : 0.0,
                 st.drafts > 0 ? static_cast<double>(st.draft_tokens_accepted) / static_cast<double>(st.drafts) : 0.0,
                 st.draft_seconds * 1e3);
  }
  if (kv_budget.budget > 0) {
    const EngineStats st = (*engine)->stats();
    const double block = opts.block_size;
    std::fprintf(stderr,
                 "kv budget %d: %lld compactions, %lld tokens evicted, %lld blocks freed (%.2f of evicted/block size), "
                 "%.1f ms compacting; KV held at most %lld blocks (budget %d blocks)\n",
                 kv_budget.budget, static_cast<long long>(st.compactions), static_cast<long long>(st.kv_tokens_evicted),
                 static_cast<long long>(st.kv_blocks_freed),
                 st.kv_tokens_evicted > 0 ? static_cast<double>(st.kv_blocks_freed) / (static_cast<double>(st.kv_tokens_evicted) / block) : 0.0,
                 st.compaction_seconds * 1e3, static_cast<long long>(max_blocks), kv_budget.budget / opts.block_size);
  }
  return 0;
}

}  // namespace kvstash::cli
