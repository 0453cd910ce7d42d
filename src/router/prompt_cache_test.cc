// The tokenized-prefix cache gives exactly the tokenizer's tokens, turn after turn of growing
// chats rendered with the built-in templates, with real vocabularies (Qwen2's ChatML, Llama 3's
// header format); it reuses the previous turn's tokens; it is off for SentencePiece.
#include "router/prompt_cache.h"

#include <gtest/gtest.h>

#include <random>

#include "gguf/gguf.h"
#include "server/chat_template.h"

namespace kvstash::router {
namespace {

const std::string kVocabDir = KVSTASH_SHARED_DIR "/vocab/";

std::unique_ptr<Tokenizer> load(const std::string& name) {
  auto file = gguf::File::open(kVocabDir + name);
  EXPECT_TRUE(file) << file.status().to_string();
  if (!file) return nullptr;
  auto tok = Tokenizer::from_gguf(**file);
  EXPECT_TRUE(tok) << tok.status().to_string();
  return tok ? std::move(*tok) : nullptr;
}

std::string random_text(std::mt19937& rng) {
  static const char* kWords[] = {"hello", " world", "  spaced", "12345", "\n\n", "naïve", "日本語", "don't", "<|im_end", "|>",
                                 "\t", "x", "!", "  ", "über", "42.5", "<|eot_id|>"};
  std::string out;
  const int n = 1 + static_cast<int>(rng() % 40);
  for (int i = 0; i < n; ++i) out += kWords[rng() % std::size(kWords)];
  return out;
}

void check_conversations(const Tokenizer& tok, const server::ChatTemplate& tmpl) {
  PrefixTokenCache cache(tok, 1 << 20);
  ASSERT_TRUE(cache.enabled());
  std::mt19937 rng(7);
  for (int user = 0; user < 6; ++user) {
    std::vector<server::ChatMessage> messages = {{"system", "You are helpful. " + random_text(rng)}};
    for (int turn = 0; turn < 5; ++turn) {
      messages.push_back({"user", random_text(rng)});
      Expected<std::string> text = tmpl.render(messages, true, tok.token_text(tok.bos_id()), tok.token_text(tok.eos_id()));
      ASSERT_TRUE(text);
      EXPECT_EQ(cache.encode(*text), tok.encode(*text, true)) << "user " << user << " turn " << turn;
      messages.push_back({"assistant", random_text(rng)});
    }
  }
  const PrefixTokenCache::Stats s = cache.stats();
  EXPECT_EQ(s.lookups, 30u);
  EXPECT_GE(s.hits, 24u);  // every turn after a conversation's first
  EXPECT_GT(s.tokens_reused, 0u);
}

TEST(PrefixTokenCache, Qwen2ChatMLEqualsTheTokenizer) {
  auto tok = load("ggml-vocab-qwen2.gguf");
  ASSERT_TRUE(tok);
  check_conversations(*tok, server::ChatTemplate::kChatML);
}

TEST(PrefixTokenCache, Llama3EqualsTheTokenizer) {
  auto tok = load("ggml-vocab-llama-bpe.gguf");
  ASSERT_TRUE(tok);
  check_conversations(*tok, server::ChatTemplate::kLlama3);
}

// Chat prompts keep content as text (encode_with_plain_spans): through the caching tokenizer they
// are exactly the tokenizer's, content with special-token text included, and prompts whose content
// holds none still go through the cache.
TEST(PrefixTokenCache, ChatContentSpansEqualTheTokenizerAndBenignOnesHit) {
  auto tok = load("ggml-vocab-qwen2.gguf");
  ASSERT_TRUE(tok);
  PrefixTokenCache cache(*tok, 1 << 20);
  CachingTokenizer caching(*tok, cache);
  std::mt19937 rng(5);
  int benign = 0;
  for (int i = 0; i < 40; ++i) {
    const std::vector<server::ChatMessage> messages = {{"system", "Be brief."}, {"user", random_text(rng)}};
    Expected<server::RenderedChat> r = server::ChatTemplate::kChatML.render_marked(messages, true);
    ASSERT_TRUE(r && r->located);
    EXPECT_EQ(caching.encode_with_plain_spans(r->text, r->content), tok->encode_with_plain_spans(r->text, r->content));
    if (!tok->contains_special(messages[1].content)) {
      ++benign;
      EXPECT_EQ(tok->encode_with_plain_spans(r->text, r->content), tok->encode(r->text, true));
    }
  }
  ASSERT_GT(benign, 0);
  EXPECT_GE(cache.stats().lookups, static_cast<std::uint64_t>(benign));
  EXPECT_TRUE(tok->contains_special("a<|im_end|>b"));
  EXPECT_FALSE(tok->contains_special("a<|im_end b"));
}

TEST(PrefixTokenCache, SameTextTwiceIsAHitAndEvictionKeepsItExact) {
  auto tok = load("ggml-vocab-qwen2.gguf");
  ASSERT_TRUE(tok);
  PrefixTokenCache cache(*tok, 64);  // room for a few short prefixes only
  std::mt19937 rng(11);
  std::uint64_t fitting = 0;
  for (int i = 0; i < 50; ++i) {
    const std::string text = "<|im_start|>user\n" + random_text(rng) + "<|im_end|>\n<|im_start|>assistant\n";
    const std::string prefix = text.substr(0, text.rfind("<|im_end|>") + 10);
    fitting += tok->encode(prefix, true).size() <= 64 ? 1 : 0;  // kept, so the second encode hits
    EXPECT_EQ(cache.encode(text), tok->encode(text, true));
    EXPECT_EQ(cache.encode(text), tok->encode(text, true));
    EXPECT_LE(cache.stats().tokens_held, 64u);
  }
  EXPECT_GT(fitting, 10u);
  EXPECT_GE(cache.stats().hits, fitting);
}

TEST(PrefixTokenCache, OffForSentencePieceAndWhenSizedZero) {
  auto spm = load("ggml-vocab-llama-spm.gguf");
  ASSERT_TRUE(spm);
  PrefixTokenCache off(*spm, 1 << 20);
  EXPECT_FALSE(off.enabled());
  const std::string text = "</s> hello</s> world";
  EXPECT_EQ(off.encode(text), spm->encode(text, true));
  auto qwen = load("ggml-vocab-qwen2.gguf");
  ASSERT_TRUE(qwen);
  EXPECT_FALSE(PrefixTokenCache(*qwen, 0).enabled());
}

}  // namespace
}  // namespace kvstash::router
