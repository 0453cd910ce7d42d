// Issue 15's end-to-end check: a generated Llama-shaped model with the real Llama 2 / Mistral 7B
// SentencePiece vocabulary (shared/vocab/ggml-vocab-llama-spm.gguf) and a Mistral chat template
// serves chat completions through the real `kvstash serve` binary: once with the template in the
// GGUF's tokenizer.chat_template, once with it given by --chat-template-file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "gguf/gguf.h"
#include "modelgen/test_models.h"
#include "server/serve_process.h"
#include "tokenizer/tokenizer.h"

namespace kvstash::server {
namespace {

using testing::json;
using testing::ServeProcess;

const std::string kVocab = KVSTASH_SHARED_DIR "/vocab/ggml-vocab-llama-spm.gguf";
const std::string kMistralTemplate = KVSTASH_SHARED_DIR "/templates/mistralai-Mistral-Nemo-Instruct-2407.jinja";

// The tiny-llama model with the SentencePiece vocabulary, rewritten with `chat_template` in its
// metadata (none when empty).
std::string spm_model(const std::string& chat_template, const std::string& name) {
  const std::string src = kvstash::testing::test_model_path("tiny-llama", gguf::TensorType::kF16, kVocab);
  auto file = gguf::File::open(src);
  EXPECT_TRUE(file) << file.status().to_string();
  if (!file) return "";
  gguf::Writer w;
  for (const auto& [key, value] : (*file)->metadata()) w.set(key, value);
  if (!chat_template.empty()) w.set("tokenizer.chat_template", gguf::Value::string(chat_template));
  for (const auto& t : (*file)->tensors()) EXPECT_TRUE(w.add_tensor(t.name, t.type, t.dims).is_ok());
  const std::string out = std::string(KVSTASH_BINARY_DIR) + "/test-models/" + name + ".gguf";
  Status st = w.write(out, [&](std::size_t i, std::span<std::uint8_t> bytes) {
    const auto& t = (*file)->tensors()[i];
    std::memcpy(bytes.data(), t.data, std::min<std::size_t>(bytes.size(), t.n_bytes));
    return Status::ok();
  });
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return out;
}

// What the server must have tokenized: BOS, then the Mistral rendering without the "<s>" it writes.
int expected_prompt_tokens(const std::string& model_path) {
  auto file = gguf::File::open(model_path);
  EXPECT_TRUE(file);
  if (!file) return -1;
  auto tok = Tokenizer::from_gguf(**file);
  EXPECT_TRUE(tok);
  if (!tok) return -1;
  EXPECT_TRUE((*tok)->add_bos());
  return 1 + static_cast<int>((*tok)->encode("[INST]Be brief.\n\nWhy is the sky blue?[/INST]", true).size());
}

void expect_chat_completion(const ServeProcess& server, int prompt_tokens) {
  httplib::Client client("127.0.0.1", server.port());
  client.set_read_timeout(60, 0);
  const json body = {{"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                               {{"role", "user"}, {"content", "Why is the sky blue?"}}})},
                     {"max_tokens", 8},
                     {"temperature", 0}};
  auto r = client.Post("/v1/chat/completions", server.named("/v1/chat/completions", body.dump()), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json reply = json::parse(r->body);
  EXPECT_EQ(reply["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(reply["choices"][0]["message"]["content"].is_string());
  EXPECT_EQ(reply["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_GT(reply["usage"]["completion_tokens"].get<int>(), 0);
  // Mistral refuses a conversation whose roles do not alternate: a 400 naming the template's words.
  const json bad = {{"messages", json::array({{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}}})},
                    {"max_tokens", 2}};
  auto refused = client.Post("/v1/chat/completions", server.named("/v1/chat/completions", bad.dump()), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400) << refused->body;
  EXPECT_NE(refused->body.find("alternate"), std::string::npos) << refused->body;
}

std::string read_template() { return testing::read_text_file(kMistralTemplate); }

// A fresh log path: ServeProcess reads the port from the log, and a previous run's log could be
// read before the child truncates it.
std::string fresh_log(const std::string& name) {
  const std::string path = std::string(KVSTASH_BINARY_DIR) + "/" + name;
  std::filesystem::remove(path);
  return path;
}

TEST(SpmMistralChat, TemplateFromTheGguf) {
  const std::string tmpl = read_template();
  ASSERT_FALSE(tmpl.empty()) << "missing " << kMistralTemplate;
  const std::string model = spm_model(tmpl, "tiny-llama-spm-mistral");
  ASSERT_FALSE(model.empty());
  ServeProcess server(model, {}, fresh_log("spm-mistral-serve.log"));
  ASSERT_TRUE(server.ready()) << testing::read_text_file(std::string(KVSTASH_BINARY_DIR) + "/spm-mistral-serve.log");
  expect_chat_completion(server, expected_prompt_tokens(model));
  EXPECT_EQ(server.stop(), 0);
}

TEST(SpmMistralChat, TemplateFromChatTemplateFile) {
  const std::string model = spm_model("", "tiny-llama-spm-no-template");
  ASSERT_FALSE(model.empty());
  ServeProcess server(model, {"--chat-template-file", kMistralTemplate}, fresh_log("spm-mistral-file-serve.log"));
  ASSERT_TRUE(server.ready()) << testing::read_text_file(std::string(KVSTASH_BINARY_DIR) + "/spm-mistral-file-serve.log");
  expect_chat_completion(server, expected_prompt_tokens(model));
  EXPECT_EQ(server.stop(), 0);
}

}  // namespace
}  // namespace kvstash::server
