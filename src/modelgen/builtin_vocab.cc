#include "modelgen/builtin_vocab.h"

#include <map>
#include <set>
#include <string_view>

namespace kvstash::modelgen {
namespace {

// Training text for the merges: plain English prose, so that frequent words and word pieces
// ("Ġthe", "ing", "Ġand") become tokens and prompts tokenize into realistic lengths.
constexpr std::string_view kTrainingText = R"(The cache sits between the model and the people who ask it questions. When a request
arrives, the server looks at the words of the prompt and asks whether it has seen the same
beginning before. If it has, the work that was done for that beginning is loaded from memory, from
the disk, or from another machine, and only the rest of the prompt has to be read by the model.
This is why a long conversation feels fast: each new turn shares almost all of its history with
the turn before it, and the history does not need to be computed again.

A language model reads text as a sequence of tokens. Each token is a small piece of a word, a whole
word, or a mark of punctuation. The model turns every token into a vector of numbers, and then it
passes those vectors through many layers. In every layer, attention lets each position look back at
the positions that came before it, and a feed forward network changes the vector at each position on
its own. The keys and values that attention computes for the earlier positions are kept, so that the
next token can be produced without reading the whole text again.

Engineers who build these systems spend their days measuring. They measure how long the first token
takes, how many tokens come out in each second, and how much memory the cache holds. They try one
idea, then another, and they keep the one that makes the numbers better. A good benchmark is a
simple thing: it sends the same requests to every server, it records the time of every answer, and
it reports what it saw without hiding the slow cases.

Once upon a time there was a small town by the sea. In the morning the fishermen went out in their
boats, and in the evening they came back with their nets full of fish. The children played on the
sand and the old people sat in the shade and talked about the weather. Nothing much happened in the
town, and that was exactly what the people who lived there liked about it.

Questions and answers: What is the capital of France? The capital of France is Paris. How many days
are there in a week? There are seven days in a week. Which is larger, the sun or the moon? The sun is
much larger than the moon, but the moon is closer to the earth, and so the two look almost the same
size in the sky. Please write a short story about a robot that learns to paint.
)";

enum TokenType : std::int32_t { kNormal = 1, kControl = 3, kUnused = 5 };  // llama_token_type values

bool is_letter(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_space(unsigned char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// A simplified GPT-2 pre-tokenizer: an optional leading space joined to a run of letters, digits
// or punctuation; other whitespace stands alone. Merges never cross these pieces.
std::vector<std::string> pre_tokenize(std::string_view text) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t start = i;
    if (text[i] == ' ' && i + 1 < text.size() && !is_space(static_cast<unsigned char>(text[i + 1]))) ++i;
    unsigned char c = static_cast<unsigned char>(text[i]);
    auto same_class = [&](unsigned char d) {
      if (is_letter(c)) return is_letter(d);
      if (is_digit(c)) return is_digit(d);
      if (is_space(c)) return is_space(d);
      return !is_letter(d) && !is_digit(d) && !is_space(d);
    };
    ++i;
    while (i < text.size() && same_class(static_cast<unsigned char>(text[i]))) ++i;
    words.emplace_back(text.substr(start, i - start));
  }
  return words;
}

std::vector<std::string> train_merges() {
  // word (as its current symbol sequence) -> how often it occurs
  std::map<std::vector<std::string>, int> words;
  for (const std::string& w : pre_tokenize(kTrainingText)) {
    std::vector<std::string> symbols;
    for (unsigned char c : w) symbols.push_back(byte_token(c));
    ++words[symbols];
  }
  std::vector<std::string> merges;
  while (static_cast<int>(merges.size()) < kBuiltinMerges) {
    std::map<std::pair<std::string, std::string>, int> pair_counts;  // ordered: ties resolve by pair
    for (const auto& [symbols, count] : words) {
      for (std::size_t i = 0; i + 1 < symbols.size(); ++i) pair_counts[{symbols[i], symbols[i + 1]}] += count;
    }
    const std::pair<std::string, std::string>* best = nullptr;
    int best_count = 0;
    for (const auto& [pair, count] : pair_counts) {
      if (count > best_count) { best = &pair; best_count = count; }
    }
    if (best == nullptr) break;  // every word is one symbol
    const std::pair<std::string, std::string> merge = *best;
    merges.push_back(merge.first + " " + merge.second);
    std::map<std::vector<std::string>, int> merged_words;
    for (const auto& [symbols, count] : words) {
      std::vector<std::string> out;
      for (std::size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == merge.first && symbols[i + 1] == merge.second) {
          out.push_back(merge.first + merge.second);
          ++i;
        } else {
          out.push_back(symbols[i]);
        }
      }
      merged_words[out] += count;
    }
    words = std::move(merged_words);
  }
  return merges;
}

// Qwen3 and Qwen3-MoE checkpoints ship Qwen2's tokenizer (tokenizer.ggml.pre "qwen2"). Gemma 3's
// is SentencePiece, which the built-in vocabulary is not: gemma3 files get Qwen2's byte-level one
// (llama.cpp reads the tokenizer independently of the architecture); --vocab gives a real one.
std::string vocab_family(const std::string& arch) {
  if (arch == "phi3") return "phi3";  // SentencePiece in real files; the byte-level stand-in with Phi-3's specials
  // gpt-oss ships o200k_harmony (byte-level BPE): Qwen2's byte-level stand-in here.
  // mistral3 ships Tekken (byte-level BPE): Llama 3's byte-level stand-in here.
  if (arch == "mistral3") return "llama";
  return arch == "qwen3" || arch == "qwen3moe" || arch == "gemma3" || arch == "gpt-oss" ? "qwen2" : arch;
}

std::vector<std::string> special_tokens(const std::string& arch) {
  if (arch == "qwen2") return {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  // Phi-3's: llama.cpp's vocabulary loader looks up "</s>" and "<unk>" by name in any model whose
  // general.name says phi3.
  if (arch == "phi3") return {"<unk>", "<s>", "</s>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"};
  return {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
}

// The chat templates the real models carry (tokenizer_config.json "chat_template"), without the
// tool-calling branches: ChatML for Qwen2.5, the Llama 3 header format for Llama.
constexpr const char* kChatMlTemplate =
    "{%- if messages[0]['role'] != 'system' %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
// Phi-3's turn markup: <|role|>, newline, content, <|end|>.
constexpr const char* kPhi3Template =
    "{%- for message in messages %}{{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|assistant|>\n' }}{%- endif %}";
constexpr const char* kLlama3Template =
    "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt "
    "%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";

}  // namespace

std::string byte_token(std::uint8_t byte) {
  // GPT-2 keeps printable Latin-1 bytes as themselves and moves the rest to U+0100 + n, n counting
  // the non-printable bytes in order, so every byte has a visible, whitespace-free spelling.
  auto printable = [](unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); };
  unsigned code = byte;
  if (!printable(byte)) {
    unsigned n = 0;
    for (unsigned b = 0; b < byte; ++b) n += printable(b) ? 0 : 1;
    code = 256 + n;
  }
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else {  // two-byte UTF-8 covers everything up to U+07FF
    out += static_cast<char>(0xc0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3f));
  }
  return out;
}

const std::vector<std::string>& builtin_merges() {
  static const std::vector<std::string> kMerges = train_merges();
  return kMerges;
}

namespace {
std::vector<std::string> normal_tokens() {
  std::vector<std::string> tokens;
  std::set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(byte_token(static_cast<std::uint8_t>(b)));
    seen.insert(tokens.back());
  }
  for (const std::string& m : builtin_merges()) {
    std::string joined = m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1);
    // Two different merges can spell the same token ("a bc", "ab c"); it is one token.
    if (seen.insert(joined).second) tokens.push_back(joined);
  }
  return tokens;
}
}  // namespace

std::uint64_t builtin_vocab_size(const std::string& model_arch) {
  return normal_tokens().size() + special_tokens(vocab_family(model_arch)).size();
}

Expected<std::vector<std::pair<std::string, gguf::Value>>> builtin_tokenizer_metadata(const std::string& model_arch,
                                                                                    std::uint64_t n_vocab) {
  const std::string arch = vocab_family(model_arch);
  if (arch != "qwen2" && arch != "llama" && arch != "phi3") {
    return unsupported("no built-in vocabulary for architecture " + model_arch + " (supported: llama, qwen2, qwen3, qwen3moe, gemma3, phi3, gpt-oss, mistral3)");
  }
  std::vector<std::string> tokens = normal_tokens();
  std::vector<std::int32_t> types(tokens.size(), kNormal);
  const std::int32_t first_special = static_cast<std::int32_t>(tokens.size());
  for (const std::string& s : special_tokens(arch)) {
    tokens.push_back(s);
    types.push_back(kControl);
  }
  for (std::uint64_t n = 0; tokens.size() < n_vocab; ++n) {
    tokens.push_back("<|unused_" + std::to_string(n) + "|>");
    types.push_back(kUnused);
  }
  using gguf::Value;
  std::vector<std::pair<std::string, Value>> kv;
  kv.emplace_back("tokenizer.ggml.model", Value::string("gpt2"));
  kv.emplace_back("tokenizer.ggml.pre", Value::string(arch == "qwen2" ? "qwen2" : "llama-bpe"));
  if (arch == "phi3") {
    kv.emplace_back("tokenizer.ggml.tokens", Value::string_array(std::move(tokens)));
    kv.emplace_back("tokenizer.ggml.token_type", Value::i32_array(std::move(types)));
    kv.emplace_back("tokenizer.ggml.merges", Value::string_array(builtin_merges()));
    kv.emplace_back("tokenizer.ggml.unknown_token_id", Value::u32(first_special));
    kv.emplace_back("tokenizer.ggml.bos_token_id", Value::u32(first_special + 1));
    kv.emplace_back("tokenizer.ggml.eos_token_id", Value::u32(first_special + 3));
    kv.emplace_back("tokenizer.ggml.eot_token_id", Value::u32(first_special + 7));
    kv.emplace_back("tokenizer.ggml.add_bos_token", Value::boolean(true));
    kv.emplace_back("tokenizer.chat_template", Value::string(kPhi3Template));
    return kv;
  }
  kv.emplace_back("tokenizer.ggml.tokens", Value::string_array(std::move(tokens)));
  kv.emplace_back("tokenizer.ggml.token_type", Value::i32_array(std::move(types)));
  kv.emplace_back("tokenizer.ggml.merges", Value::string_array(builtin_merges()));
  if (arch == "qwen2") {
    const std::uint32_t endoftext = first_special, im_end = first_special + 2;
    kv.emplace_back("tokenizer.ggml.bos_token_id", Value::u32(endoftext));
    kv.emplace_back("tokenizer.ggml.eos_token_id", Value::u32(endoftext));
    kv.emplace_back("tokenizer.ggml.eot_token_id", Value::u32(im_end));
    kv.emplace_back("tokenizer.ggml.padding_token_id", Value::u32(endoftext));
    kv.emplace_back("tokenizer.ggml.add_bos_token", Value::boolean(false));
    kv.emplace_back("tokenizer.chat_template", Value::string(kChatMlTemplate));
  } else {
    const std::uint32_t bos = first_special, eos = first_special + 1, eot = first_special + 4;
    kv.emplace_back("tokenizer.ggml.bos_token_id", Value::u32(bos));
    kv.emplace_back("tokenizer.ggml.eos_token_id", Value::u32(eos));
    kv.emplace_back("tokenizer.ggml.eot_token_id", Value::u32(eot));
    kv.emplace_back("tokenizer.ggml.add_bos_token", Value::boolean(true));
    kv.emplace_back("tokenizer.chat_template", Value::string(kLlama3Template));
  }
  return kv;
}

}  // namespace kvstash::modelgen
