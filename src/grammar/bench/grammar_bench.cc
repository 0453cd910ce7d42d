// grammar_bench: what constrained decoding costs on a real vocabulary (Qwen2/2.5's 151,936
// tokens by default): building the token trie, compiling each schema (JSON Schema -> grammar ->
// CompiledGrammar), and the sampler's time per token with and without the grammar, for the
// first request of a schema (cold: the DFA and masks are built as it goes) and for later ones
// (warm: the same schema, other content). Logits are random, so the output wanders over the
// whole grammar; every document is checked to end and parse.
//
// usage: grammar_bench [VOCAB.gguf] [DOCUMENTS]   (default: shared/vocab/ggml-vocab-qwen2.gguf, 20;
//        0 documents: the vocabulary only)
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "gguf/gguf.h"
#include "grammar/json_schema.h"
#include "grammar/token_matcher.h"
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

}  // namespace

int main(int argc, char** argv) {
  const std::string vocab_path = argc > 1 ? argv[1] : std::string(KVSTASH_SHARED_DIR) + "/vocab/ggml-vocab-qwen2.gguf";
  const int documents = argc > 2 ? std::atoi(argv[2]) : 20;
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
  return 0;
}
