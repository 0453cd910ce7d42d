// The Responses API translation: a request and its stored history into a chat request, and its bad
// inputs refused by name (or 404 for a previous response that is not there, or another tenant's).
#include "server/responses_api.h"

#include <gtest/gtest.h>

namespace kvstash::server {
namespace {

using nlohmann::json;

std::optional<ResponsesError> translate(ResponseStore& store, const json& body, ResponsesTranslation& out,
                                        const std::string& tenant = "") {
  return translate_responses_request(body.dump(), store, tenant, out);
}

TEST(ResponsesApi, HistoryItemsAndInstructionsBecomeTheChatRequest) {
  ResponseStore store(std::chrono::seconds(60), 10);
  store.put("resp_1", StoredResponse{"t", json::array({{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "hello"}}}), json::object(), {}});
  ResponsesTranslation t;
  const json body = {{"model", "m"}, {"instructions", "be brief"}, {"previous_response_id", "resp_1"}, {"max_output_tokens", 9},
                     {"input", json::array({{{"type", "function_call"}, {"call_id", "c1"}, {"name", "f"}, {"arguments", "{}"}},
                                            {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "42"}},
                                            {{"role", "developer"}, {"content", json::array({{{"type", "input_text"}, {"text", "x"}}})}}})}};
  ASSERT_FALSE(translate(store, body, t, "t"));
  const json& m = t.chat["messages"];
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0], json({{"role", "system"}, {"content", "be brief"}}));
  EXPECT_EQ(m[2]["content"], "hello");
  EXPECT_EQ(m[3]["tool_calls"][0]["id"], "c1");
  EXPECT_EQ(m[4], json({{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "42"}}));
  EXPECT_EQ(m[5], json({{"role", "system"}, {"content", "x"}}));
  EXPECT_EQ(t.chat["max_tokens"], 9);
  EXPECT_EQ(t.chat["prompt_cache_retention"], "60s");  // stored: its prompt pinned as long as it is kept
  EXPECT_EQ(t.messages.size(), 5u);                    // stored without the instructions
  // A retention the client names is the one the chat path pins with (it validates and bounds it).
  json asked = body;
  asked["prompt_cache_retention"] = "24h";
  ResponsesTranslation t2;
  ASSERT_FALSE(translate(store, asked, t2, "t"));
  EXPECT_EQ(t2.chat["prompt_cache_retention"], "24h");
}

TEST(ResponsesApi, BadInputsAreRefusedByName) {
  ResponseStore store(std::chrono::seconds(60), 10);
  store.put("resp_1", StoredResponse{"tenant-a", json::array({{{"role", "user"}, {"content", "hi"}}}), json::object(), {}});
  auto refusal = [&](const json& body, const std::string& tenant = "") {
    ResponsesTranslation t;
    auto err = translate(store, body, t, tenant);
    return err ? std::to_string(err->status) + " " + err->message : std::string("accepted");
  };
  const json base = {{"model", "m"}, {"input", "hi"}};
  EXPECT_NE(refusal({{"input", "hi"}}).find("400 'model'"), std::string::npos);
  EXPECT_NE(refusal({{"model", "m"}}).find("400 'input'"), std::string::npos);
  json b = base;
  b["background"] = true;
  EXPECT_NE(refusal(b).find("'background' is not supported"), std::string::npos);
  b = base;
  b["tools"] = json::array({{{"type", "web_search"}}});
  EXPECT_NE(refusal(b).find("'web_search' is not supported"), std::string::npos);
  b = base;
  b["input"] = json::array({{{"role", "user"}, {"content", json::array({{{"type", "input_image"}}})}}});
  EXPECT_NE(refusal(b).find("'input_image' is not supported"), std::string::npos);
  b = base;
  b["text"] = {{"format", {{"type", "xml"}}}};
  EXPECT_NE(refusal(b).find("'xml'"), std::string::npos);
  // A field this server does not know is refused by name, as are values of known ones it cannot honour.
  b = base;
  b["frobnicate"] = 1;
  EXPECT_NE(refusal(b).find("400 'frobnicate' is not supported"), std::string::npos);
  b = base;
  b["truncation"] = "auto";
  EXPECT_NE(refusal(b).find("'truncation'"), std::string::npos);
  b["truncation"] = "disabled";
  EXPECT_EQ(refusal(b), "accepted");
  b = base;
  b["top_logprobs"] = 3;
  EXPECT_NE(refusal(b).find("'top_logprobs'"), std::string::npos);
  b["top_logprobs"] = 0;
  EXPECT_EQ(refusal(b), "accepted");
  b = base;
  b["service_tier"] = "flex";
  EXPECT_NE(refusal(b).find("'service_tier'"), std::string::npos);
  b = base;
  b["text"] = {{"verbosity", "low"}};
  EXPECT_NE(refusal(b).find("text.verbosity"), std::string::npos);
  b = base;
  b["context_management"] = json::array({{{"type", "compaction"}}});
  EXPECT_NE(refusal(b).find("'context_management' is not supported"), std::string::npos);
  // What the Agents SDK sends with its defaults is accepted.
  b = base;
  b["include"] = json::array();
  b["truncation"] = nullptr;
  b["metadata"] = {{"k", "v"}};
  b["safety_identifier"] = "u1";
  b["stream_options"] = json::object();
  b["text"] = {{"format", {{"type", "text"}}}, {"verbosity", "medium"}};
  EXPECT_EQ(refusal(b), "accepted");
  b = base;
  b["previous_response_id"] = "resp_1";
  EXPECT_EQ(refusal(b, "tenant-a"), "accepted");
  EXPECT_NE(refusal(b, "tenant-b").find("404"), std::string::npos) << "another tenant's response";
  b["previous_response_id"] = "resp_none";
  EXPECT_NE(refusal(b, "tenant-a").find("404"), std::string::npos);
  EXPECT_TRUE(store.erase("resp_1", "tenant-a"));
  b["previous_response_id"] = "resp_1";
  EXPECT_NE(refusal(b, "tenant-a").find("404"), std::string::npos) << "a deleted response";
}

TEST(ResponsesApi, TheStoreDropsTheOldestPastItsBound) {
  ResponseStore store(std::chrono::seconds(60), 2);
  for (int i = 0; i < 3; ++i) store.put("r" + std::to_string(i), StoredResponse{"", json::array(), json::object(), {}});
  EXPECT_FALSE(store.get("r0", ""));
  EXPECT_TRUE(store.get("r1", ""));
  EXPECT_TRUE(store.get("r2", ""));
  EXPECT_EQ(store.size(), 2u);
}

TEST(ResponsesApi, IdsNameTheNodeThatStoresThem) {
  const std::string key = "0A1b2C3d" + std::string(56, 'e');  // a public key, hex
  const std::string tag = response_node_tag(key);
  EXPECT_EQ(tag, "0a1b2c3d");
  ResponseStore store(std::chrono::seconds(60), 8, tag);
  const std::string id = store.new_id();
  EXPECT_EQ(id.rfind("resp_0a1b2c3d", 0), 0u) << id;
  EXPECT_EQ(response_owner_tag(id), tag);
  EXPECT_NE(store.new_id(), id);
  // Untagged (a node without an identity), foreign or malformed ids name no node.
  ResponseStore untagged(std::chrono::seconds(60), 8);
  EXPECT_EQ(response_owner_tag(untagged.new_id()), "");
  EXPECT_EQ(response_owner_tag("resp_1"), "");
  EXPECT_EQ(response_owner_tag("msg_0a1b2c3d" + std::string(24, '0')), "");
  EXPECT_EQ(response_owner_tag("resp_0a1b2c3d" + std::string(23, '0') + "g"), "");
  EXPECT_EQ(response_node_tag("abc"), "");
  EXPECT_EQ(response_node_tag("zzzzzzzz"), "");
}

}  // namespace
}  // namespace kvstash::server
