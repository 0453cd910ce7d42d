#include "server/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace kvstash::server {
namespace {

std::string published(const std::string& name) {
  std::ifstream in(KVSTASH_SHARED_DIR "/templates/" + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << "missing shared/templates/" << name;
  return ss.str();
}

// Renders a published template (shared/templates) with BOS "<s>" and EOS "</s>".
std::string render_published(const std::string& name, const std::vector<ChatMessage>& messages, bool generation_prompt) {
  Expected<ChatTemplate> t = ChatTemplate::from_jinja(published(name));
  EXPECT_TRUE(t.has_value()) << name << ": " << t.status().to_string();
  if (!t) return "";
  Expected<std::string> text = t->render(messages, generation_prompt, "<s>", "</s>");
  EXPECT_TRUE(text.has_value()) << name << ": " << text.status().to_string();
  return text ? *text : "";
}

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};

TEST(ChatTemplate, GgufTemplateRunsAsJinja) {
  auto chatml = choose_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}{% endfor %}", "");
  ASSERT_TRUE(chatml) << chatml.status().to_string();
  EXPECT_TRUE(chatml->kind.is_jinja());
  EXPECT_TRUE(chatml->warning.empty());
  EXPECT_EQ(render_chat(chatml->kind, {{"user", "Hi"}}, false), "<|im_start|>user\nHi");
  EXPECT_EQ(std::string(chatml->kind.end_token()), "");  // the tokenizer's end-of-generation tokens stop it
}

TEST(ChatTemplate, NoTemplateFallsBackToChatMLWithWarning) {
  auto c = choose_chat_template("", "");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, ChatTemplate::kChatML);
  EXPECT_FALSE(c->warning.empty());
}

TEST(ChatTemplate, UnusableTemplateIsAnErrorNamingTheConstruct) {
  std::string tmpl = "{% include 'header.jinja' %}[INST] {{ message }} [/INST]" + std::string(200, 'x');
  auto c = choose_chat_template(tmpl, "");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  const std::string& message = c.status().message();
  EXPECT_NE(message.find("unsupported tag 'include'"), std::string::npos) << message;
  EXPECT_NE(message.find("--chat-template-file"), std::string::npos) << message;
  EXPECT_NE(message.find("[INST] {{ message }}"), std::string::npos) << message;
  // Only the first 80 characters are quoted.
  EXPECT_EQ(message.find(std::string(100, 'x')), std::string::npos);
  // A construct that only fails when rendering is caught at start too.
  auto raises = choose_chat_template("{{ raise_exception('no chat here') }}", "");
  ASSERT_FALSE(raises);
  EXPECT_NE(raises.status().message().find("no chat here"), std::string::npos);
}

TEST(ChatTemplate, OverrideWinsAndUnknownOverrideFails) {
  auto c = choose_chat_template("{% include 'x' %}", "llama3");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, ChatTemplate::kLlama3);
  auto bad = choose_chat_template("<|im_start|>", "mistral");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("mistral"), std::string::npos);
  // The text of a template (what --chat-template-file reads) overrides the GGUF's.
  auto file = choose_chat_template("{% include 'x' %}", "{% for m in messages %}[{{ m.content }}]{% endfor %}");
  ASSERT_TRUE(file) << file.status().to_string();
  EXPECT_EQ(render_chat(file->kind, {{"user", "a"}, {"assistant", "b"}}, true), "[a][b]");
}

TEST(ChatTemplate, RendersChatML) {
  EXPECT_EQ(render_chat(ChatTemplate::kChatML, kConversation, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(ChatTemplate::kChatML, {{"user", "x"}}, false), "<|im_start|>user\nx<|im_end|>\n");
}

TEST(ChatTemplate, RendersLlama3WithTrimmedContentAndNoBos) {
  std::vector<ChatMessage> m = {{"system", " Be brief. "}, {"user", "Hi\n"}};
  EXPECT_EQ(render_chat(ChatTemplate::kLlama3, m, true),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, ToolMessagesAreUserLike) {
  std::string s = render_chat(ChatTemplate::kChatML, {{"tool", "42"}}, false);
  EXPECT_EQ(s, "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n");
  EXPECT_EQ(std::string(chat_template_end_token(ChatTemplate::kLlama3)), "<|eot_id|>");
}

// Published templates against outputs checked by hand against each format's documentation.
TEST(PublishedChatTemplates, QwenChatML) {
  EXPECT_EQ(render_published("Qwen-Qwen2.5-7B-Instruct.jinja", kConversation, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
            "Hello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
  // Without a system message Qwen2.5 adds its own.
  EXPECT_EQ(render_published("Qwen-Qwen2.5-7B-Instruct.jinja", {{"user", "Hi"}}, false),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n");
}

TEST(PublishedChatTemplates, Llama3) {
  EXPECT_EQ(render_published("meta-llama-Llama-3.3-70B-Instruct.jinja", kConversation, true),
            "<s><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 26 Jul 2024\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>user<|end_header_id|>"
            "\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(PublishedChatTemplates, MistralPutsTheSystemPromptIntoTheLastUserTurn) {
  EXPECT_EQ(render_published("mistralai-Mistral-Nemo-Instruct-2407.jinja", kConversation, true),
            "<s>[INST]Hi[/INST]Hello</s>[INST]Be brief.\n\nBye[/INST]");
}

TEST(PublishedChatTemplates, GemmaRefusesSystemAndNamesTheModelTurn) {
  const std::vector<ChatMessage> no_system(kConversation.begin() + 1, kConversation.end());
  EXPECT_EQ(render_published("google-gemma-2-2b-it.jinja", no_system, true),
            "<s><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  Expected<ChatTemplate> gemma = ChatTemplate::from_jinja(published("google-gemma-2-2b-it.jinja"));
  ASSERT_TRUE(gemma);
  Expected<std::string> refused = gemma->render(kConversation, true, "<s>", "</s>");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.status().message().find("System role not supported"), std::string::npos);
}

TEST(PublishedChatTemplates, DeepSeekR1DistillWritesAnEmptyThinkBlock) {
  EXPECT_EQ(render_published("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", kConversation, true),
            "<s>Be brief.<\xEF\xBD\x9CUser\xEF\xBD\x9C>Hi<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>Hello"
            "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C><\xEF\xBD\x9CUser\xEF\xBD\x9C>Bye"
            "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C><think>\n</think>");
}

}  // namespace
}  // namespace kvstash::server
