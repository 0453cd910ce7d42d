#include "server/chat_template.h"

#include <gtest/gtest.h>

namespace kvstash::server {
namespace {

TEST(ChatTemplate, RecognisesChatMLAndLlama3) {
  auto chatml = choose_chat_template("{% for m in messages %}<|im_start|>{{ m.role }}...", "");
  ASSERT_TRUE(chatml);
  EXPECT_EQ(chatml->kind, ChatTemplateKind::kChatML);
  EXPECT_TRUE(chatml->warning.empty());
  auto llama = choose_chat_template("{{ '<|start_header_id|>' + message['role'] }}", "");
  ASSERT_TRUE(llama);
  EXPECT_EQ(llama->kind, ChatTemplateKind::kLlama3);
}

TEST(ChatTemplate, NoTemplateFallsBackToChatMLWithWarning) {
  auto c = choose_chat_template("", "");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, ChatTemplateKind::kChatML);
  EXPECT_FALSE(c->warning.empty());
}

TEST(ChatTemplate, UnknownTemplateIsAnErrorQuotingIt) {
  std::string tmpl = "[INST] {{ message }} [/INST]" + std::string(200, 'x');
  auto c = choose_chat_template(tmpl, "");
  ASSERT_FALSE(c);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("[INST] {{ message }}"), std::string::npos);
  // Only the first 80 characters are quoted.
  EXPECT_EQ(c.status().message().find(std::string(100, 'x')), std::string::npos);
}

TEST(ChatTemplate, OverrideWinsAndUnknownOverrideFails) {
  auto c = choose_chat_template("[INST] unknown", "llama3");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, ChatTemplateKind::kLlama3);
  auto bad = choose_chat_template("<|im_start|>", "mistral");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("mistral"), std::string::npos);
}

TEST(ChatTemplate, RendersChatML) {
  std::vector<ChatMessage> m = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
  EXPECT_EQ(render_chat(ChatTemplateKind::kChatML, m, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(ChatTemplateKind::kChatML, {{"user", "x"}}, false), "<|im_start|>user\nx<|im_end|>\n");
}

TEST(ChatTemplate, RendersLlama3WithTrimmedContentAndNoBos) {
  std::vector<ChatMessage> m = {{"system", " Be brief. "}, {"user", "Hi\n"}};
  EXPECT_EQ(render_chat(ChatTemplateKind::kLlama3, m, true),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, ToolMessagesAreUserLike) {
  std::string s = render_chat(ChatTemplateKind::kChatML, {{"tool", "42"}}, false);
  EXPECT_EQ(s, "<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n");
  EXPECT_EQ(std::string(chat_template_end_token(ChatTemplateKind::kLlama3)), "<|eot_id|>");
}

}  // namespace
}  // namespace kvstash::server
