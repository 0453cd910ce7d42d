// grammar_bench: what constrained decoding costs on a real vocabulary (Qwen2/2.5's 151,936
// tokens by default): building the token trie, compiling each schema (JSON Schema -> grammar ->
// CompiledGrammar), and the sampler's time per token with and without the grammar, for the
// first request of a schema (cold: the DFA and masks are built as it goes) and for later ones
// (warm: the same schema, other content). Logits are random, so the output wanders over the
// whole grammar; every document is checked to end and parse.
//
// usage: grammar_bench [VOCAB.gguf] [DOCUMENTS] [MODEL.gguf]
//        (default: shared/vocab/ggml-vocab-qwen2.gguf, 20; 0 documents: the vocabulary only)
// With MODEL (whose tokenizer is VOCAB's, e.g. `kvstash gen-model --preset qwen2.5-0.5b --vocab
// VOCAB`), it also decodes through the engine at batch 1 (4 documents per schema, 200 tokens at
// most), each document twice from the same seed:
// under the schema, then unconstrained for as many tokens. The mean gap between tokens of the two
// runs gives the whole cost of constrained decoding as a share of a decode step, from one run.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "gguf/gguf.h"
#include "grammar/json_schema.h"
#include "grammar/token_matcher.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace kvstash;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

struct Schema {
  const char* name;
  const char* text;
};

const Schema kSchemas[] = {
    {"person (server e2e test)", R"J({"type": "object", "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 8}, "age": {"type": "integer", "minimum": 18, "maximum": 99},
      "tags": {"type": "array", "items": {"enum": ["red", "green", "blue"]}, "minItems": 1, "maxItems": 3},
      "address": {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                  "floor": {"type": "integer", "minimum": -2, "maximum": 40}}, "required": ["zip", "floor"], "additionalProperties": false},
      "pet": {"anyOf": [{"type": "null"}, {"type": "boolean"}, {"enum": ["cat", "dog"]}]}},
      "required": ["name", "age", "tags", "address", "pet"], "additionalProperties": false})J"},
    {"catalog ($defs, recursion)", R"J({"$defs": {"item": {"type": "object", "properties": {
      "id": {"type": "integer", "exclusiveMinimum": -50, "maximum": 99999}, "sku": {"type": "string", "pattern": "[A-Z]{2}\\d{3}"},
      "children": {"type": "array", "items": {"$ref": "#/$defs/item"}, "maxItems": 2}}, "required": ["id", "sku"],
      "additionalProperties": false}}, "type": "object", "properties": {
      "items": {"type": "array", "items": {"$ref": "#/$defs/item"}, "minItems": 1, "maxItems": 3},
      "status": {"anyOf": [{"type": "integer", "minimum": -5, "maximum": 5}, {"enum": ["ok", "err"]}, {"type": "null"}]},
      "note": {"type": "string", "maxLength": 40}}, "required": ["items", "status"]})J"},
    {"form (12 fields, optional ones)", R"J({"type": "object", "properties": {
      "first": {"type": "string", "maxLength": 20}, "last": {"type": "string", "maxLength": 20},
      "email": {"type": "string", "pattern": "[a-z0-9._]{1,16}@[a-z]{2,10}\\.(com|org|net)"},
      "phone": {"type": "string", "pattern": "\\+?[0-9]{7,12}"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "height": {"type": "number"}, "member": {"type": "boolean"}, "plan": {"enum": ["free", "pro", "team", "enterprise"]},
      "seats": {"type": "integer", "minimum": 1, "maximum": 10000}, "notes": {"type": ["string", "null"], "maxLength": 60},
      "labels": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 5},
      "meta": {"type": "object", "properties": {"source": {"const": "web"}, "ts": {"type": "integer", "minimum": 0}}, "required": ["source"]}},
      "required": ["first", "last", "email", "age", "member", "plan"]})J"},
};

struct Run {
  std::vector<double> step_ms;  // the sampler's whole step (mask included)
  std::vector<double> mask_ms;  // CompiledGrammar::allowed_tokens alone (before the sampler asks)
  std::string text;
  bool ended = false;
};

// One document under `grammar` (or unconstrained when null, for the same number of steps as
// `steps`), with random logits from `seed`.
Run generate(const std::shared_ptr<const grammar::CompiledGrammar>& g, std::uint64_t seed, int n_vocab, TokenId eos,
             int max_steps) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = seed;
  p.grammar = g;
  Sampler sampler(p, {eos});
  std::mt19937 rng(static_cast<std::uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> logits(static_cast<std::size_t>(n_vocab));
  Run run;
  grammar::MatcherState state = g ? g->initial_state() : 0;
  std::vector<std::uint64_t> mask;
  for (int step = 0; step < max_steps; ++step) {
    for (float& l : logits) l = normal(rng);
    if (g) {
      // The mask on its own: the first time a state is seen this is the trie walk, after that a
      // copy of the cached mask (the sampler's own call below then always finds it cached, so
      // step_ms - mask_ms is the rest of sampling).
      const auto m0 = Clock::now();
      if (Status st = g->allowed_tokens(state, mask); !st) {
        std::fprintf(stderr, "error: %s\n", st.message().c_str());
        return run;
      }
      run.mask_ms.push_back(ms_since(m0));
    }
    const auto t0 = Clock::now();
    SampleResult r = sampler.sample(logits.data(), n_vocab, 0);
    run.step_ms.push_back(ms_since(t0));
    if (!r.error.empty()) {
      std::fprintf(stderr, "error: %s\n", r.error.c_str());
      return run;
    }
    if (r.token == eos) {
      run.ended = true;
      return run;
    }
    if (g) {
      run.text += g->vocabulary().bytes(r.token);
      state = *g->advance(state, r.token);
    }
  }
  return run;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// The mean gap between consecutive tokens of one batch-1 generation (the prefill and the first
// token excluded), and how many tokens it made.
struct Decode {
  double gap_ms = 0;
  int tokens = 0;
};

Decode decode(Engine& engine, const std::vector<TokenId>& prompt, std::shared_ptr<const grammar::CompiledGrammar> g,
              std::uint64_t seed, int max_tokens) {
  GenerationRequest req;
  req.prompt = prompt;
  req.sampling.temperature = 1.0f;
  req.sampling.seed = seed;
  req.sampling.grammar = std::move(g);
  req.max_tokens = max_tokens;
  req.stop_at_end_of_generation = req.sampling.grammar != nullptr;  // the plain run makes as many tokens
  std::vector<Clock::time_point> at;
  auto r = generate(engine, std::move(req), [&at](TokenId) { at.push_back(Clock::now()); });
  Decode d;
  if (!r || at.size() < 3) return d;
  d.tokens = static_cast<int>(at.size());
  d.gap_ms = std::chrono::duration<double, std::milli>(at.back() - at[1]).count() / static_cast<double>(at.size() - 2);
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string vocab_path = argc > 1 ? argv[1] : std::string(KVSTASH_SHARED_DIR) + "/vocab/ggml-vocab-qwen2.gguf";
  const int documents = argc > 2 ? std::atoi(argv[2]) : 20;
  const std::string model_path = argc > 3 ? argv[3] : "";
  auto file = gguf::File::open(vocab_path);
  if (!file) return std::fprintf(stderr, "%s\n", file.status().to_string().c_str()), 1;
  auto tok = Tokenizer::from_gguf(**file);
  if (!tok) return std::fprintf(stderr, "%s\n", tok.status().to_string().c_str()), 1;
  const int n_vocab = static_cast<int>((*tok)->vocab_size());

  auto t0 = Clock::now();
  std::vector<std::string> bytes(static_cast<std::size_t>(n_vocab));
  std::vector<grammar::TokenIndex> eog;
  for (int i = 0; i < n_vocab; ++i) {
    bytes[static_cast<std::size_t>(i)] = (*tok)->token_to_piece(i);
    if ((*tok)->is_end_of_generation(i)) eog.push_back(i);
  }
  const double pieces_ms = ms_since(t0);
  const auto t1 = Clock::now();
  auto vocab = grammar::TokenVocabulary::create(std::move(bytes), eog);
  std::printf("vocabulary: %d tokens, %zu trie nodes, built in %.1f ms (once per model: %.1f ms the tokens' bytes, %.1f ms the trie)\n",
              n_vocab, vocab->trie_nodes(), ms_since(t0), pieces_ms, ms_since(t1));
  if (documents == 0) return 0;
  const TokenId eos = eog.at(0);

  std::printf("\n| schema | compile (median of 20) | rules | mask, cold (first document): mean / p99 / max | "
              "mask, warm (next %d documents): mean / p50 / p99 | sampler step with grammar, warm: mean | "
              "sampler step without, same logits: mean | DFA states |\n|---|---|---|---|---|---|---|---|\n",
              documents);
  for (const Schema& s : kSchemas) {
    std::vector<double> compile_ms;
    std::shared_ptr<const grammar::CompiledGrammar> g;
    std::size_t rules = 0;
    for (int i = 0; i < 20; ++i) {
      t0 = Clock::now();
      auto grammar = grammar::compile_json_schema_text(s.text);
      if (!grammar) return std::fprintf(stderr, "%s: %s\n", s.name, grammar.status().to_string().c_str()), 1;
      rules = grammar->rules.size();
      auto compiled = grammar::CompiledGrammar::create(std::move(*grammar), vocab, s.text);
      if (!compiled) return std::fprintf(stderr, "%s\n", compiled.status().to_string().c_str()), 1;
      compile_ms.push_back(ms_since(t0));
      g = std::move(*compiled);
    }
    Run cold = generate(g, 1, n_vocab, eos, 2000);
    std::vector<double> warm, warm_mask, plain;
    int ended = cold.ended ? 1 : 0, parsed = 0;
    auto check = [&parsed](const Run& r) {
      parsed += r.ended && !nlohmann::json::parse(r.text, nullptr, false).is_discarded();
    };
    check(cold);
    for (int d = 0; d < documents; ++d) {
      Run r = generate(g, 100 + static_cast<std::uint64_t>(d), n_vocab, eos, 2000);
      warm.insert(warm.end(), r.step_ms.begin(), r.step_ms.end());
      warm_mask.insert(warm_mask.end(), r.mask_ms.begin(), r.mask_ms.end());
      ended += r.ended;
      check(r);
      Run u = generate(nullptr, 100 + static_cast<std::uint64_t>(d), n_vocab, eos, static_cast<int>(r.step_ms.size()));
      plain.insert(plain.end(), u.step_ms.begin(), u.step_ms.end());
    }
    std::printf("| %s | %.2f ms | %zu | %.3f / %.2f / %.1f ms (%zu tokens) | %.4f / %.4f / %.3f ms | %.3f ms | %.3f ms | %zu |\n",
                s.name, percentile(compile_ms, 0.5), rules, mean(cold.mask_ms), percentile(cold.mask_ms, 0.99),
                *std::max_element(cold.mask_ms.begin(), cold.mask_ms.end()), cold.mask_ms.size(), mean(warm_mask),
                percentile(warm_mask, 0.5), percentile(warm_mask, 0.99), mean(warm), mean(plain), g->stats().states);
    if (ended != documents + 1 || parsed != ended) {
      std::fprintf(stderr, "%s: %d of %d documents ended, %d parsed\n", s.name, ended, documents + 1, parsed);
      return 1;
    }
  }
  if (model_path.empty()) return 0;

  auto model = Model::load(model_path);
  if (!model) return std::fprintf(stderr, "%s\n", model.status().to_string().c_str()), 1;
  if ((*model)->config().n_vocab != n_vocab) {
    return std::fprintf(stderr, "%s has %d tokens, %s %d: generate the model with --vocab %s\n", model_path.c_str(),
                        (*model)->config().n_vocab, vocab_path.c_str(), n_vocab, vocab_path.c_str()), 1;
  }
  EngineOptions eo;
  eo.n_ctx = 2048;
  eo.max_running = 1;
  auto engine = Engine::create(**model, eo);
  if (!engine) return std::fprintf(stderr, "%s\n", engine.status().to_string().c_str()), 1;
  const std::vector<TokenId> prompt = (*tok)->encode("Describe it as JSON:", true);
  const int engine_documents = std::min(documents, 4), engine_tokens = 200;  // ~2 minutes on the 0.5B preset
  decode(**engine, prompt, nullptr, 1, 16);  // warm-up: first touches of the weights
  std::printf("\nbatch 1 through the engine, %s: %d documents per schema, each decoded under the schema and then unconstrained "
              "from the same seed for as many tokens\n\n| schema | tokens | step with grammar: mean | without | cost of "
              "constrained decoding (share of a decode step) |\n|---|---|---|---|---|\n",
              model_path.c_str(), engine_documents);
  for (const Schema& s : kSchemas) {
    auto grammar = grammar::compile_json_schema_text(s.text);
    if (!grammar) return std::fprintf(stderr, "%s: %s\n", s.name, grammar.status().to_string().c_str()), 1;
    auto compiled = grammar::CompiledGrammar::create(std::move(*grammar), vocab, s.text);
    if (!compiled) return std::fprintf(stderr, "%s\n", compiled.status().to_string().c_str()), 1;
    std::shared_ptr<const grammar::CompiledGrammar> g = std::move(*compiled);
    decode(**engine, prompt, g, 99, engine_tokens);  // the first document of a schema builds its states (the cold rows above)
    double with_ms = 0, without_ms = 0;
    int tokens = 0, counted = 0;
    for (int d = 0; d < engine_documents; ++d) {
      const Decode c = decode(**engine, prompt, g, 200 + static_cast<std::uint64_t>(d), engine_tokens);
      if (c.tokens < 3) continue;
      const Decode u = decode(**engine, prompt, nullptr, 200 + static_cast<std::uint64_t>(d), c.tokens);
      with_ms += c.gap_ms * (c.tokens - 2);
      without_ms += u.gap_ms * (c.tokens - 2);
      tokens += c.tokens - 2;
      ++counted;
    }
    if (counted == 0) return std::fprintf(stderr, "%s: no document of 3 tokens or more\n", s.name), 1;
    const double w = with_ms / tokens, u = without_ms / tokens;
    std::printf("| %s | %d | %.2f ms | %.2f ms | %+.1f %% |\n", s.name, tokens, w, u, 100.0 * (w - u) / u);
  }
  return 0;
}
