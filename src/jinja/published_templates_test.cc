// Every chat template in shared/templates, rendered for the conversations in
// testdata/conversations.json by this interpreter and by Python's jinja2 (the oracle, run as
// testdata/render_with_jinja2.py; Debian python3-jinja2). Where jinja2 renders, the outputs must
// be equal byte for byte; where jinja2 fails (a template that refuses a conversation, e.g.
// "System role not supported"), this must fail too. Templates that use what the interpreter does
// not implement are listed in kUnsupported with the construct; nothing is skipped silently.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "jinja/template.h"

namespace kvstash::jinja {
namespace {

namespace fs = std::filesystem;

const std::string kTemplatesDir = KVSTASH_SHARED_DIR "/templates";
const std::string kTestData = fs::path(__FILE__).parent_path() / "testdata";
constexpr std::time_t kNow = 1721995200;  // 2024-07-26 12:00 UTC, for strftime_now on both sides

// Templates whose output differs from jinja2's, with the construct that is missing. Empty: all
// 70 templates of shared/templates render as jinja2 does.
const std::map<std::string, std::string> kUnsupported = {};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Where two renders part, with some context: full texts of long templates drown the log.
std::string first_difference(const std::string& got, const std::string& want) {
  std::size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  const std::size_t from = i < 60 ? 0 : i - 60;
  return "outputs differ at byte " + std::to_string(i) + " of " + std::to_string(want.size()) + ":\n  got:    " +
         nlohmann::json(got.substr(from, 120)).dump() + "\n  jinja2: " + nlohmann::json(want.substr(from, 120)).dump();
}

// Runs the oracle once for all tests.
const nlohmann::json& oracle() {
  static const nlohmann::json results = [] {
    const std::string out_path = std::string(KVSTASH_BINARY_DIR) + "/jinja2_oracle.json";
    const std::string command = "python3 '" + kTestData + "/render_with_jinja2.py' '" + kTemplatesDir + "' '" +
                                kTestData + "/conversations.json' " + std::to_string(kNow) + " > '" + out_path + "'";
    const int rc = std::system(command.c_str());
    EXPECT_EQ(rc, 0) << "the jinja2 oracle failed (is python3-jinja2 installed?): " << command;
    const std::string text = read_file(out_path);
    if (rc != 0 || text.empty()) return nlohmann::json::object();
    return nlohmann::json::parse(text);
  }();
  return results;
}

// Ordered: templates print dicts (tools' schemas) in the order the request gave them.
const nlohmann::ordered_json& conversations() {
  static const nlohmann::ordered_json c =
      nlohmann::ordered_json::parse(read_file(kTestData + "/conversations.json"))["conversations"];
  return c;
}

std::vector<std::string> template_names() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(kTemplatesDir)) {
    if (entry.path().extension() == ".jinja") names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(PublishedTemplates, AllSeventyArePresentAndTheOracleRan) {
  EXPECT_EQ(template_names().size(), 70u) << "shared/templates should hold 70 templates";
  EXPECT_EQ(oracle().size(), template_names().size());
  EXPECT_EQ(conversations().size(), 10u);
}

// The texts of a message's content: a string, or the "text" of each part of a list; trimmed, as
// several templates trim them.
std::vector<std::string> content_texts(const nlohmann::ordered_json& message) {
  std::vector<std::string> texts;
  const auto& content = message["content"];
  if (content.is_string()) {
    texts.push_back(content.get<std::string>());
  } else if (content.is_array()) {
    for (const auto& part : content) {
      if (part.contains("text")) texts.push_back(part["text"].get<std::string>());
    }
  }
  for (std::string& t : texts) {
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.pop_back();
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.erase(0, 1);
  }
  return texts;
}

// Every template that renders a conversation shows each user message's text, in order.
TEST(PublishedTemplates, UserMessagesAppearInOrder) {
  for (const std::string& name : template_names()) {
    Expected<Template> tmpl = Template::parse(read_file(kTemplatesDir + "/" + name));
    ASSERT_TRUE(tmpl) << name << ": " << tmpl.status().to_string();
    for (const auto& conversation : conversations()) {
      Expected<std::string> got = tmpl->render(from_json(conversation["context"]).as_dict(), {kNow});
      if (!got) continue;  // a conversation the template refuses (jinja2 agrees: OutputsEqualJinja2)
      std::size_t pos = 0;
      for (const auto& message : conversation["context"]["messages"]) {
        if (message["role"] != "user") continue;
        for (const std::string& text : content_texts(message)) {
          const std::size_t at = got->find(text, pos);
          EXPECT_NE(at, std::string::npos) << name << " / " << conversation["name"] << ": '" << text
                                           << "' missing or out of order";
          if (at != std::string::npos) pos = at + text.size();
        }
      }
    }
  }
}

TEST(PublishedTemplates, OutputsEqualJinja2) {
  const std::vector<std::string> names = template_names();
  ASSERT_FALSE(names.empty());
  std::size_t equal = 0;
  std::size_t both_refuse = 0;
  std::size_t total = 0;
  std::size_t templates_all_agree = 0;
  for (const std::string& name : names) {
    ASSERT_TRUE(oracle().contains(name)) << name;
    const nlohmann::json& expected = oracle()[name];
    Expected<Template> tmpl = Template::parse(read_file(kTemplatesDir + "/" + name));
    const bool listed = kUnsupported.count(name) != 0;
    bool all_agree = true;
    for (std::size_t i = 0; i < conversations().size(); ++i) {
      ++total;
      const nlohmann::ordered_json& conversation = conversations()[i];
      const std::string label = name + " / " + conversation["name"].get<std::string>();
      Expected<std::string> got = tmpl ? tmpl->render(from_json(conversation["context"]).as_dict(), {kNow})
                                       : Expected<std::string>(tmpl.status());
      const bool oracle_ok = expected[i]["ok"].get<bool>();
      bool agree;
      if (oracle_ok) {
        agree = got.has_value() && *got == expected[i]["text"].get<std::string>();
        if (!listed) {
          EXPECT_TRUE(got.has_value()) << label << ": " << got.status().to_string();
          if (got && !agree) ADD_FAILURE() << label << ": " << first_difference(*got, expected[i]["text"]);
        }
        if (agree) ++equal;
      } else {
        agree = !got.has_value();
        if (!listed) {
          EXPECT_FALSE(got.has_value()) << label << ": jinja2 fails (" << expected[i]["error"] << ")";
        }
        if (agree) ++both_refuse;
      }
      all_agree = all_agree && agree;
    }
    if (all_agree) ++templates_all_agree;
    if (listed) {
      // A listed template must still fail with an error naming what is missing, not misrender.
      EXPECT_FALSE(all_agree) << name << " now agrees with jinja2: take it off kUnsupported";
    }
  }
  std::printf("published templates: %zu / %zu agree with jinja2 on every conversation; renders: %zu equal, "
              "%zu refused by both, %zu of %zu\n",
              templates_all_agree, names.size(), equal, both_refuse, equal + both_refuse, total);
}

}  // namespace
}  // namespace kvstash::jinja
