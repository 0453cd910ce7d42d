// The semantic half of ResponseCache (response_cache.h, docs/semantic-cache.md): the lookup that
// falls back to the index after an exact miss, the signed semantic entries stored next to
// records, and the index's rebuild from the tiers at start.
#include "cache/semantic_entry.h"
#include "server/log.h"
#include "server/response_cache.h"

namespace kvstash::server {

std::optional<SemanticQuery> ResponseCache::semantic_query(const ParsedRequest& parsed, const GenerationRequest& request,
                                                           const Tokenizer& tokenizer) const {
  if (!semantic_) return std::nullopt;
  std::string why;
  std::optional<SemanticQuery> q =
      server::semantic_query(parsed, request, tokenizer, fingerprint_, options_.engine_config, &why);
  if (!q) semantic_skipped_.fetch_add(1, std::memory_order_relaxed);
  return q;
}

LookupResult ResponseCache::run_lookup(const cache::ChunkKey& key, std::optional<SemanticQuery> query, bool exact_done) {
  LookupResult result;
  std::size_t bytes = 0;
  if (!exact_done) result.record = fetch(key, &bytes);
  if (result.record) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    bytes_served_.fetch_add(bytes, std::memory_order_relaxed);
    return result;
  }
  if (query && semantic_) {
    Expected<std::vector<float>> embedding = options_.embed(query->text_tokens);
    if (!embedding) {
      semantic_embed_errors_.fetch_add(1, std::memory_order_relaxed);
      query.reset();  // neither looked up nor indexed
    } else {
      query->embedding = std::move(*embedding);
      int refused = 0;
      const std::vector<SemanticIndex::Candidate> near =
          semantic_->find(query->ns, query->embedding, query->literals, &refused);
      semantic_refused_literals_.fetch_add(static_cast<std::uint64_t>(refused), std::memory_order_relaxed);
      for (const SemanticIndex::Candidate& c : near) {
        // The candidate's record passes every check an exact hit passes (signature, trust, TTL).
        // Local tiers only: a worker never waits on a peer (the index names records held here).
        result.record = fetch(c.record_key, &bytes, cache::PlanScope::kLocal);
        if (!result.record) continue;
        result.semantic = true;
        semantic_hits_.fetch_add(1, std::memory_order_relaxed);
        bytes_served_.fetch_add(bytes, std::memory_order_relaxed);
        return result;
      }
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  result.query = std::move(query);
  return result;
}

void ResponseCache::store_semantic(const cache::ChunkKey& key, const SemanticQuery& query) {
  if (!semantic_ || !self_ || query.embedding.empty()) return;
  cache::SemanticEntry e;
  e.record_key = key;
  e.ns = query.ns;
  e.model_fingerprint = fingerprint_;
  e.producer = self_->public_key();
  e.embedding = query.embedding;
  e.literals = query.literals;
  e.signature = self_->sign(cache::kSemanticSignatureDomain, cache::signed_message(e));
  Expected<cache::Bytes> bytes = cache::encode_semantic_entry(e);
  if (!bytes || !store_->store(cache::semantic_envelope_meta(key, fingerprint_), *bytes)) {
    store_errors_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!semantic_->add(e.ns, key, e.embedding, e.literals)) semantic_not_indexed_.fetch_add(1, std::memory_order_relaxed);
}

void ResponseCache::rebuild_semantic_index() {
  std::size_t seen = 0;
  for (std::size_t t = 0; t < store_->tier_count(); ++t) {
    cache::Tier& tier = store_->tier(t);
    Expected<std::vector<cache::ChunkKey>> keys = tier.list_keys();
    if (!keys) {
      log_line("semantic cache: cannot list the " + tier.name() + " tier: " + keys.status().message());
      continue;
    }
    for (const cache::ChunkKey& key : *keys) {
      Expected<cache::Bytes> bytes = tier.get(key);
      if (!bytes) continue;
      Expected<cache::ChunkHeader> header = cache::parse_chunk_header(*bytes);
      if (!header || header->meta.kv_format != cache::kSemanticKvFormat) continue;  // a response record
      ++seen;
      auto rejected = [&] { semantic_entries_rejected_.fetch_add(1, std::memory_order_relaxed); };
      if (header->meta.model_fingerprint != fingerprint_) continue;  // another model's: not ours to judge
      Expected<cache::ChunkView> view = cache::decode_chunk(*bytes, header->meta);
      if (!view) {
        rejected();
        continue;
      }
      Expected<cache::SemanticEntry> entry = cache::decode_semantic_entry(view->payload);
      if (!entry || cache::semantic_entry_key(entry->record_key) != key || entry->model_fingerprint != fingerprint_ ||
          !identity::verify(entry->producer, cache::kSemanticSignatureDomain, cache::signed_message(*entry),
                            entry->signature) ||
          !trust_ || !trust_->trusts(entry->producer)) {
        rejected();
        continue;
      }
      if (semantic_->add(entry->ns, entry->record_key, entry->embedding, std::move(entry->literals))) {
        semantic_rebuilt_.fetch_add(1, std::memory_order_relaxed);
      } else {
        semantic_not_indexed_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  log_line("semantic cache: threshold " + std::to_string(options_.semantic.threshold) + ", index rebuilt with " +
           std::to_string(semantic_->size()) + " entries (" + std::to_string(seen) + " found in the tiers)");
}

std::string ResponseCache::render_semantic_metrics() const {
  auto v = [](const std::atomic<std::uint64_t>& a) { return std::to_string(a.load(std::memory_order_relaxed)); };
  std::string out;
  out += "# HELP kvstash_response_cache_semantic_total Semantic cache events: near-duplicates refused by the literals gate,\n";
  out += "# requests the eligibility gates kept out, embeddings that failed, answers not indexed, entries rebuilt at start\n";
  out += "# and entries rejected then (bad, forged or untrusted).\n";
  out += "# TYPE kvstash_response_cache_semantic_total counter\n";
  out += "kvstash_response_cache_semantic_total{event=\"refused_literals\"} " + v(semantic_refused_literals_) + "\n";
  out += "kvstash_response_cache_semantic_total{event=\"not_eligible\"} " + v(semantic_skipped_) + "\n";
  out += "kvstash_response_cache_semantic_total{event=\"embed_error\"} " + v(semantic_embed_errors_) + "\n";
  out += "kvstash_response_cache_semantic_total{event=\"not_indexed\"} " + v(semantic_not_indexed_) + "\n";
  out += "kvstash_response_cache_semantic_total{event=\"rebuilt\"} " + v(semantic_rebuilt_) + "\n";
  out += "kvstash_response_cache_semantic_total{event=\"rejected_entry\"} " + v(semantic_entries_rejected_) + "\n";
  out += "# HELP kvstash_response_cache_semantic_entries Entries in the semantic index.\n";
  out += "# TYPE kvstash_response_cache_semantic_entries gauge\n";
  out += "kvstash_response_cache_semantic_entries " + std::to_string(semantic_entries()) + "\n";
  out += "# HELP kvstash_response_cache_semantic_bytes The semantic index's estimated memory (bounded).\n";
  out += "# TYPE kvstash_response_cache_semantic_bytes gauge\n";
  out += "kvstash_response_cache_semantic_bytes " + std::to_string(semantic_->bytes()) + "\n";
  out += "# HELP kvstash_response_cache_semantic_evicted_total Namespaces dropped from the index to stay within its bounds.\n";
  out += "# TYPE kvstash_response_cache_semantic_evicted_total counter\n";
  out += "kvstash_response_cache_semantic_evicted_total " + std::to_string(semantic_->evicted()) + "\n";
  return out;
}

}  // namespace kvstash::server
