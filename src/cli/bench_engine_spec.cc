#include "cli/bench_engine_spec.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include "kernels/simd_dispatch.h"

namespace kvstash::cli {
namespace {

// A passage of ordinary prose, so the tokenizer gives ordinary tokens.
constexpr const char* kPassage =
    "The harbour town woke slowly. Fishing boats came in with the tide, gulls followed them, and the market "
    "opened its stalls one by one: bread, nets, lamp oil, and the first apples of the season. By noon the "
    "square was full, and the old clock on the customs house, which had been wrong for years, struck eleven.";

struct Run {
  std::vector<TokenId> tokens;
  double decode_tokens_per_s = 0;
  EngineStats stats;
};

Expected<Run> generate_once(const Model& model, const std::vector<TokenId>& prompt, const SamplingParams& sampling,
                            int decode_tokens, const SpeculativeOptions& spec, int n_threads) {
  EngineOptions o;
  o.n_ctx = static_cast<int>(prompt.size()) + decode_tokens + 16;
  o.max_running = 1;
  o.prefix_cache = false;  // every run prefills alike
  o.n_threads = n_threads;
  o.kv_pool_tokens = o.n_ctx;
  o.prefill_chunk = o.n_ctx;
  o.step_token_budget = o.n_ctx;
  o.speculative = spec;
  auto engine = Engine::create(model, o);
  if (!engine) return engine.status();
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling = sampling;
  r.max_tokens = decode_tokens;
  r.stop_at_end_of_generation = false;
  auto result = generate(**engine, r);
  if (!result) return result.status();
  if (result->finish == FinishReason::kError) return internal_error(result->error);
  Run run;
  run.tokens = result->tokens;
  const double decode_s = result->total_s - result->ttft_s;  // the first token comes with the prefill
  run.decode_tokens_per_s = static_cast<double>(run.tokens.size() - 1) / std::max(decode_s, 1e-9);
  run.stats = (*engine)->stats();
  return run;
}

struct Comparison {
  std::string workload;
  std::int64_t generated = 0;          // tokens per run
  int prompt_tokens = 0;
  double plain_tps = 0, spec_tps = 0;  // best of the repeats
  std::vector<double> pair_ratios;     // speculative / plain of each back-to-back pair
  double median_ratio() const {
    std::vector<double> v = pair_ratios;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }
  EngineStats spec_stats;              // of the last speculative run
  bool same_output = true;
};

// Plain and speculative runs alternate, so a load that comes and goes hits both alike.
Expected<Comparison> compare(const Model& model, const std::string& name, const std::vector<TokenId>& prompt,
                             const SamplingParams& sampling, int decode_tokens, int repeats, const SpeculativeOptions& spec, int n_threads, bool progress) {
  Comparison c;
  c.workload = name;
  c.prompt_tokens = static_cast<int>(prompt.size());
  for (int i = 0; i < repeats; ++i) {
    if (progress) std::fprintf(stderr, "… %s, run %d of %d\n", name.c_str(), i + 1, repeats);
    auto plain = generate_once(model, prompt, sampling, decode_tokens, SpeculativeOptions{}, n_threads);
    if (!plain) return plain.status();
    auto drafted = generate_once(model, prompt, sampling, decode_tokens, spec, n_threads);
    if (!drafted) return drafted.status();
    c.plain_tps = std::max(c.plain_tps, plain->decode_tokens_per_s);
    c.spec_tps = std::max(c.spec_tps, drafted->decode_tokens_per_s);
    c.pair_ratios.push_back(drafted->decode_tokens_per_s / plain->decode_tokens_per_s);
    c.spec_stats = drafted->stats;
    c.generated = static_cast<std::int64_t>(drafted->tokens.size());
    c.same_output = c.same_output && plain->tokens == drafted->tokens;
  }
  return c;
}

double ratio(std::int64_t a, std::int64_t b) { return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0; }

}  // namespace

int bench_engine_spec(const Model& model, const SpeculativeOptions& spec, int decode_tokens, int repeats, int n_threads,
                      bool json, const std::string& passage_text) {
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "kvstash bench-engine: %s\n", st.to_string().c_str());
    return 1;
  };
  const Tokenizer& tok = model.tokenizer();
  const int nv = model.config().n_vocab;
  std::vector<TokenId> passage;
  if (tok.add_bos() && tok.bos_id() >= 0) passage.push_back(tok.bos_id());
  const auto text = tok.encode(passage_text.empty() ? std::string(kPassage) : passage_text, /*parse_special=*/false);
  passage.insert(passage.end(), text.begin(), text.end());
  if (!json) std::fprintf(stderr, "… the model's own continuation of the passage\n");
  auto own = generate_once(model, passage, SamplingParams{}, 2 * decode_tokens, SpeculativeOptions{}, n_threads);
  if (!own) return fail(own.status());
  std::vector<TokenId> copying = passage;
  copying.insert(copying.end(), own->tokens.begin(), own->tokens.end());
  // No acceptance: 48 tokens (from the middle of the vocabulary) in a random order, and the output
  // sampled among them alone (every other token banned by logit_bias) at a temperature that makes
  // them about equally likely (a fixed seed): every last token occurred before, so a draft is
  // always found, and it continues the output about 1 time in 48.
  constexpr int kAlphabet = 48;
  const TokenId first = nv / 2;
  std::vector<TokenId> scrambled;
  std::mt19937_64 rng(36);
  for (int i = 0; i < static_cast<int>(copying.size()); ++i) scrambled.push_back(first + static_cast<TokenId>(rng() % kAlphabet));
  SamplingParams noise;
  noise.temperature = 1000.0f;
  noise.seed = 36;
  for (TokenId t = 0; t < nv; ++t) {
    if (t < first || t >= first + kAlphabet) noise.logit_bias.emplace_back(t, -100.0f);
  }

  std::vector<Comparison> results;
  // A draft model drafts from its own weights, not the prompt: it also gets the greedy
  // continuation of the passage alone (acceptance = how often the draft's greedy token is the
  // target's before the output loops); on copying both models are in the target's loop.
  std::vector<std::pair<std::string, std::pair<const std::vector<TokenId>*, SamplingParams>>> workloads = {
      {"copying", {&copying, SamplingParams{}}}, {"no-acceptance", {&scrambled, noise}}};
  if (spec.draft == DraftKind::kModel) workloads.insert(workloads.begin(), {"greedy", {&passage, SamplingParams{}}});
  for (const auto& [name, work] : workloads) {
    auto c = compare(model, name, *work.first, work.second, decode_tokens, repeats, spec, n_threads, !json);
    if (!c) return fail(c.status());
    results.push_back(std::move(*c));
  }
  nlohmann::json out = {{"model", model.config().name}, {"simd", kernels::simd_path()}, {"threads", n_threads},
                        {"decode_tokens", decode_tokens}, {"repeats", repeats}, {"spec_k", spec.max_draft},
                        {"drafter", spec.draft == DraftKind::kModel ? "model" : "ngram"},
                        {"draft_model", spec.draft_model ? spec.draft_model->config().name : ""},
                        {"max_ngram", spec.max_ngram}, {"min_ngram", spec.min_ngram}, {"workloads", nlohmann::json::array()}};
  for (const Comparison& c : results) {
    const EngineStats& s = c.spec_stats;
    out["workloads"].push_back({{"workload", c.workload},
                                {"prompt_tokens", c.prompt_tokens},
                                {"plain_decode_tokens_per_s", c.plain_tps},
                                {"spec_decode_tokens_per_s", c.spec_tps},
                                {"speedup", c.spec_tps / c.plain_tps},
                                {"median_pair_speedup", c.median_ratio()},
                                {"tokens_from_drafts", ratio(s.draft_tokens_accepted, c.generated)},
                                // Forward passes after the first token (which comes with the prefill):
                                // one per token plain, one per token less the accepted drafted ones.
                                {"plain_decode_passes", c.generated - 1},
                                {"spec_decode_passes", c.generated - 1 - s.draft_tokens_accepted},
                                {"drafts", s.drafts},
                                {"draft_tokens", s.draft_tokens},
                                {"draft_tokens_accepted", s.draft_tokens_accepted},
                                {"acceptance_rate", ratio(s.draft_tokens_accepted, s.draft_tokens)},
                                {"mean_accepted_length", ratio(s.draft_tokens_accepted, s.drafts)},
                                {"draft_seconds", s.draft_seconds},
                                {"same_output", c.same_output}});
  }
  bool same = true;
  for (const Comparison& c : results) same = same && c.same_output;
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    const std::string drafter = spec.draft == DraftKind::kModel
                                    ? "--spec model (draft model " + spec.draft_model->config().name + ")"
                                    : "--spec ngram (n-grams " + std::to_string(spec.min_ngram) + ".." + std::to_string(spec.max_ngram) + ")";
    std::printf("model %s, %s, %d threads; batch 1, %d decode tokens, best of %d; %s --spec-k %d\n",
                model.config().name.c_str(), kernels::simd_path(), n_threads, decode_tokens, repeats, drafter.c_str(),
                spec.max_draft);
    for (const Comparison& c : results) {
      const EngineStats& s = c.spec_stats;
      std::printf("  %-14s prompt %4d   plain %8.2f tokens/s   speculative %8.2f tokens/s   = %.2fx (median pair %.2fx)   acceptance %.0f%% "
                  "(%lld of %lld drafted, %.2f per draft; %.0f%% of the output), decode passes %lld -> %lld, drafting %.1f ms%s\n",
                  c.workload.c_str(), c.prompt_tokens, c.plain_tps, c.spec_tps, c.spec_tps / c.plain_tps, c.median_ratio(),
                  100 * ratio(s.draft_tokens_accepted, s.draft_tokens), static_cast<long long>(s.draft_tokens_accepted),
                  static_cast<long long>(s.draft_tokens), ratio(s.draft_tokens_accepted, s.drafts),
                  100 * ratio(s.draft_tokens_accepted, c.generated), static_cast<long long>(c.generated - 1),
                  static_cast<long long>(c.generated - 1 - s.draft_tokens_accepted), 1e3 * s.draft_seconds,
                  c.same_output ? "" : "   OUTPUT DIFFERS");
    }
  }
  if (!same) {
    std::fprintf(stderr, "kvstash bench-engine: speculation changed a greedy output (a bug)\n");
    return 1;
  }
  return 0;
}

}  // namespace kvstash::cli
