// Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) from the project's own
// encoders, so that the fuzzer starts from inputs that pass every check and reaches deep code at
// once: GGUF files from gguf::Writer (a byte-level BPE vocabulary, a SentencePiece one, tensors),
// chunks from encode_chunk (plain and zstd), records from encode_response_record, manifests from
// make_manifest, and hand-written request bodies, HTTP requests and Jinja templates (a few of the
// published chat templates in ../shared/templates among them).
//
// Usage: fuzz_make_seeds OUT_DIR (scripts/fuzz.sh seeds). Deterministic: the same files every run.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cache/chunk_codec.h"
#include "cache/response_record.h"
#include "gguf/gguf.h"
#include "share/manifest.h"
#include "tokenizer/byte_unicode.h"

namespace fs = std::filesystem;
using kvstash::cache::Bytes;

namespace {

fs::path g_out;

void write(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_out / target;
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}
std::string str(const Bytes& b) { return std::string(b.begin(), b.end()); }
std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
void check(bool ok, const char* what) {
  if (!ok) {
    std::cerr << "make_seeds: " << what << " failed\n";
    std::exit(1);
  }
}

// ---- GGUF ----

std::string gguf_bytes(const kvstash::gguf::Writer& w) {
  const fs::path tmp = g_out / "tmp.gguf";
  const auto st = w.write(tmp.string(), [](std::size_t i, std::span<std::uint8_t> out) {
    for (std::size_t k = 0; k < out.size(); ++k) out[k] = static_cast<std::uint8_t>(k * 7 + i);
    return kvstash::Status::ok();
  });
  check(st.is_ok(), "gguf write");
  std::string bytes = read_file(tmp);
  fs::remove(tmp);
  return bytes;
}

void gguf_seeds() {
  using kvstash::gguf::Value;
  {  // byte-level BPE: the 256 byte tokens, a few merges, ChatML control tokens
    kvstash::gguf::Writer w;
    std::vector<std::string> tokens;
    std::vector<std::int32_t> types;
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(kvstash::tokenizer::bytes_to_mapped(std::string(1, static_cast<char>(b))));
      types.push_back(1);
    }
    const std::vector<std::string> merges = {"H e", "l l", "He ll", "o Ġ", "Ġ w"};
    for (const std::string& m : merges) {
      std::string joined = m;
      joined.erase(joined.find(' '), 1);
      tokens.push_back(joined);
      types.push_back(1);
    }
    for (const char* special : {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}) {
      tokens.push_back(special);
      types.push_back(3);
    }
    w.set("general.architecture", Value::string("qwen2"));
    w.set("tokenizer.ggml.model", Value::string("gpt2"));
    w.set("tokenizer.ggml.pre", Value::string("qwen2"));
    w.set("tokenizer.ggml.tokens", Value::string_array(tokens));
    w.set("tokenizer.ggml.token_type", Value::i32_array(types));
    w.set("tokenizer.ggml.merges", Value::string_array(merges));
    w.set("tokenizer.ggml.eos_token_id", Value::u32(static_cast<std::uint32_t>(tokens.size() - 2)));
    w.set("tokenizer.ggml.add_bos_token", Value::boolean(false));
    w.set("tokenizer.chat_template", Value::string("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"));
    write("gguf", "bpe_vocab", gguf_bytes(w));
  }
  {  // SentencePiece: control tokens, byte fallback, pieces with scores
    kvstash::gguf::Writer w;
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    std::vector<std::int32_t> types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "<0x%02X>", b);
      tokens.push_back(hex);
      types.push_back(6);
    }
    for (const char* piece : {"▁", "▁H", "ello", "▁w", "orld", "▁Hello", "1", "2", "3", "ö"}) {
      tokens.push_back(piece);
      types.push_back(1);
    }
    std::vector<float> scores(tokens.size());
    for (std::size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
    w.set("tokenizer.ggml.model", Value::string("llama"));
    w.set("tokenizer.ggml.tokens", Value::string_array(tokens));
    w.set("tokenizer.ggml.scores", Value::f32_array(scores));
    w.set("tokenizer.ggml.token_type", Value::i32_array(types));
    w.set("tokenizer.ggml.bos_token_id", Value::u32(1));
    w.set("tokenizer.ggml.eos_token_id", Value::u32(2));
    w.set("tokenizer.ggml.add_space_prefix", Value::boolean(true));
    write("gguf", "spm_vocab", gguf_bytes(w));
  }
  {  // tensors of several types and an explicit alignment, metadata of every scalar type
    kvstash::gguf::Writer w;
    w.set("general.architecture", Value::string("llama"));
    w.set("general.alignment", Value::u32(64));
    w.set("llama.block_count", Value::u32(1));
    w.set("llama.rope.freq_base", Value::f32(10000.0f));
    w.set("general.file_type", Value::i32(7));
    w.set("general.size", Value::u64(123456789));
    w.set("general.flag", Value::boolean(true));
    check(w.add_tensor("token_embd.weight", kvstash::gguf::TensorType::kF16, {8, 4}).is_ok(), "tensor");
    check(w.add_tensor("blk.0.attn_q.weight", kvstash::gguf::TensorType::kQ8_0, {32, 2}).is_ok(), "tensor");
    check(w.add_tensor("output_norm.weight", kvstash::gguf::TensorType::kF32, {8}).is_ok(), "tensor");
    check(w.add_tensor("blk.0.ffn.weight", kvstash::gguf::TensorType::kQ4_K, {256, 1}).is_ok(), "tensor");
    write("gguf", "tensors", gguf_bytes(w));
  }
}

// ---- request bodies (first byte: 0 chat, 1 completions) ----

void request_seeds() {
  const std::vector<std::pair<std::string, std::string>> chat = {
      {"minimal", R"({"messages":[{"role":"user","content":"Hello"}]})"},
      {"full", R"({"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":" there"}]},{"role":"assistant","content":null},{"role":"tool","content":"x"}],"max_completion_tokens":16,"max_tokens":8,"temperature":0.7,"top_p":0.9,"top_k":40,"seed":42,"stop":["\n","END"],"n":1,"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":5,"cache_salt":"tenant","ignore_eos":false,"response_cache":false,"kv_budget":256,"user":"u","tools":[],"presence_penalty":0})"},
      {"unsupported", R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}],"logit_bias":{"1":2}})"},
      {"unicode", "{\"messages\":[{\"role\":\"user\",\"content\":\"\\ud83d\\ude00 caf\xc3\xa9 \\u0000\"}],\"stop\":\"x\"}"},
  };
  const std::vector<std::pair<std::string, std::string>> completions = {
      {"text", R"({"prompt":"Once upon a time","max_tokens":5,"temperature":0,"logprobs":2,"echo":false})"},
      {"tokens", R"({"prompt":[1,2,3,4294967295,-1],"max_tokens":1,"seed":18446744073709551615})"},
      {"list", R"({"prompt":["a"],"stop":null,"n":1,"best_of":1,"top_p":1e400})"},
  };
  for (const auto& [name, body] : chat) write("request_parser", "chat_" + name, std::string(1, '\0') + body);
  for (const auto& [name, body] : completions) write("request_parser", "completions_" + name, std::string(1, '\1') + body);
}

// ---- Jinja templates ----

void jinja_seeds() {
  const std::vector<std::pair<std::string, std::string>> snippets = {
      {"loops", "{% for m in messages if m.role != 'tool' %}{{ loop.index }}:{{ m.role|upper }}{% if not loop.last %},{% endif %}{% else %}none{% endfor %}"},
      {"macros", "{% macro m(a, b='B') %}<{{ a }}{{ b }}>{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"},
      {"filters", "{{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|join('|') }}{{ tools|tojson(indent=2) }}{{ '  x '|trim|replace('x', 'y')|title }}{{ [3,1,2]|sort|reverse|list }}{{ {'a': 1}.items()|list }}"},
      {"expressions", "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 'a' ~ 1 ~ none }} {{ [1, 'a', none, 1.5][1:] }} {{ 'abc'[::-1] }} {{ x is defined }} {{ 3 in [1,2,3] }} {{ 'b' if false else 'c' }}"},
      {"strings", "{{ 'hello'.startswith('he') }}{{ 'a,b'.split(',') }}{{ 'X'.lower() }}{{ '%s-%d'|format('a', 3) }}{{ messages[0].content|length }}{{ strftime_now('%Y-%m-%d') }}{% if messages[-1]['content'] is string %}s{% endif %}"},
      {"errors", "{% if messages|length > 100 %}{{ raise_exception('too many') }}{% endif %}{% set a, b = [1, 2] %}{{ b }}{{ a }}{% set s %}in {{ 1 }}{% endset %}[{{ s }}]"},
      {"whitespace", "a\n    {% if true %}\nb\n    {% endif %}\nc{{- ' d ' -}}  e {# note #}\n{%- for t in tools -%}{{ t.function.name }}{%- endfor %}"},
      {"tool_calls", "{%- for m in messages %}{%- if m.tool_calls is defined and m.tool_calls %}{%- for c in m.tool_calls %}{{ c.function.name }}({{ c.function.arguments|tojson }}){%- endfor %}{%- endif %}{%- endfor %}{% if add_generation_prompt %}{{ bos_token }}assistant{% endif %}"},
  };
  for (const auto& [name, source] : snippets) write("jinja", name, source);
  // A few published chat templates, the smallest of those the chat-template tests render.
  const fs::path dir = fs::path(KVSTASH_SHARED_DIR) / "templates";
  for (const char* name : {"Qwen-Qwen3-0.6B.jinja", "Qwen-Qwen2.5-7B-Instruct.jinja", "HuggingFaceTB-SmolLM3-3B.jinja", "Mistral-Small-3.2-24B-Instruct-2506.jinja",
                           "LFM2-8B-A1B.jinja", "Kimi-K2-Instruct.jinja", "GLM-4.6.jinja"}) {
    if (fs::exists(dir / name)) write("jinja", name, read_file(dir / name));
  }
}

// ---- HTTP requests (first byte: how the rest is split into reads) ----

void http_seeds() {
  const std::vector<std::pair<std::string, std::string>> requests = {
      {"get", "GET /v1/models?stream=true&limit=%41+b HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer k\r\n\r\n"},
      {"post", "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"a\":[1,2,3]}"},
      {"chunked", "POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nTrailer: x\r\n\r\n"},
      {"pipelined", "GET /health HTTP/1.1\r\nHost: a\r\n\r\nGET /ready HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\nHEAD /metrics HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"},
      {"continue", "POST /tokenize HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\nabcd"},
      {"http10", "GET / HTTP/1.0\r\nX-Long: " + std::string(100, 'v') + "\r\n\r\n"},
      {"bad_te", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\nabc"},
  };
  for (const auto& [name, bytes] : requests) {
    write("http_framing", name, std::string(1, '\x0f') + bytes);  // whole
    write("http_framing", name + "_split", std::string(1, '\x02') + bytes);  // 4 bytes a read
  }
}

// ---- chunks, records, manifests ----

kvstash::cache::ChunkMeta chunk_meta(bool salted) {
  kvstash::cache::ChunkMeta m;
  m.key.bytes.fill(0x11);
  m.model_fingerprint.fill(0x22);
  m.kv_format = "f16-kvh-v1";
  m.token_count = 16;
  m.first_position = 32;
  m.n_layers = 2;
  m.n_kv_heads = 2;
  m.head_dim = 8;
  m.element_type = 1;
  m.salted = salted;
  return m;
}

Bytes payload() {
  Bytes p(2 * 2 * 2 * 8 * 16 * 2);  // K and V: layers x heads x head_dim x tokens x f16
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::uint8_t>(i % 5 == 0 ? i : 0);
  return p;
}

void chunk_seeds() {
  for (bool compress : {false, true}) {
    kvstash::cache::EncodeOptions options;
    options.compress = compress;
    auto chunk = kvstash::cache::encode_chunk(chunk_meta(!compress), payload(), options);
    check(chunk.has_value(), "encode_chunk");
    const std::string name = compress ? "zstd" : "plain";
    write("chunk_codec", name, std::string(1, '\0') + str(*chunk));
    write("chunk_codec", name + "_fixup", std::string(1, '\1') + str(*chunk));

    // Manifest seeds: mode, u16le manifest length, manifest, chunk.
    const auto producer = kvstash::identity::NodeIdentity::from_seed({1, 2, 3});
    auto manifest = kvstash::share::make_manifest(*chunk, producer);
    check(manifest.has_value(), "make_manifest");
    const std::string m = kvstash::share::encode_manifest(*manifest);
    const std::string len{static_cast<char>(m.size() & 0xff), static_cast<char>(m.size() >> 8)};
    write("manifest", name, std::string(1, '\0') + len + m + str(*chunk));
    write("manifest", name + "_fixup_banned", std::string(1, '\3') + len + m + str(*chunk));
  }
  const auto record_meta = kvstash::cache::response_envelope_meta(chunk_meta(false).key, chunk_meta(false).model_fingerprint);
  kvstash::cache::ResponseRecord r;
  r.request_key.bytes.fill(0x33);
  r.model_fingerprint.fill(0x22);
  r.producer.fill(0x44);
  r.signature.fill(0x55);
  r.created_unix = 1700000000;
  r.prompt_tokens = 12;
  r.completion_tokens = 3;
  r.finish_reason = "stop";
  r.final_finish = 1;
  r.tokens = {101, 102, 103};
  r.text = "Hi there";
  auto plain = kvstash::cache::encode_response_record(r);
  check(plain.has_value(), "encode_response_record");
  write("response_record", "plain", str(*plain));
  r.has_logprobs = true;
  r.logprobs = {{-0.1f, {{101, -0.1f}, {7, -2.5f}}}, {-0.5f, {}}, {-1.0f, {{103, -1.0f}}}};
  r.final_event_has_token = false;
  r.finish_reason = "length";
  auto with_logprobs = kvstash::cache::encode_response_record(r);
  check(with_logprobs.has_value(), "encode_response_record");
  write("response_record", "logprobs", str(*with_logprobs));
  // The record inside its chunk envelope, as tiers store it: a chunk seed too.
  auto envelope = kvstash::cache::encode_chunk(record_meta, *with_logprobs);
  check(envelope.has_value(), "envelope");
  write("chunk_codec", "response_envelope", std::string(1, '\0') + str(*envelope));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_seeds OUT_DIR\n";
    return 2;
  }
  g_out = argv[1];
  fs::create_directories(g_out);
  gguf_seeds();
  request_seeds();
  jinja_seeds();
  http_seeds();
  chunk_seeds();
  std::cout << "seeds written to " << g_out << "\n";
  return 0;
}
