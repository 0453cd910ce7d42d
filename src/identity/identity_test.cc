#include "identity/identity.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include <filesystem>
#include <fstream>

namespace kvstash::identity {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() : path_(fs::temp_directory_path() / ("kvstash-identity-" + std::to_string(::getpid()))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

TEST(Identity, SignatureVerifiesOnlyForItsKeyDomainAndMessage) {
  const NodeIdentity a = NodeIdentity::generate(), b = NodeIdentity::generate();
  const Signature sig = a.sign("kvstash-response-v1", "the answer");
  EXPECT_TRUE(verify(a.public_key(), "kvstash-response-v1", "the answer", sig));
  EXPECT_FALSE(verify(b.public_key(), "kvstash-response-v1", "the answer", sig));
  EXPECT_FALSE(verify(a.public_key(), "kvstash-manifest-v1", "the answer", sig));  // no cross-kind replay
  EXPECT_FALSE(verify(a.public_key(), "kvstash-response-v1", "the answer!", sig));
  Signature flipped = sig;
  flipped[10] ^= 1;
  EXPECT_FALSE(verify(a.public_key(), "kvstash-response-v1", "the answer", flipped));
}

TEST(Identity, KeyFileIsCreatedOnceWithMode0600AndReloadedAsTheSameKey) {
  TempDir dir;
  const std::string path = dir.file("sub/node.key");
  auto first = NodeIdentity::load_or_create(path);
  ASSERT_TRUE(first) << first.status().to_string();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto second = NodeIdentity::load_or_create(path);
  ASSERT_TRUE(second);
  EXPECT_EQ(first->public_key(), second->public_key());
  EXPECT_TRUE(verify(first->public_key(), "d", "m", second->sign("d", "m")));
}

TEST(Identity, ProcessesCreatingOneKeyFileAtOnceAgreeOnOneKey) {
  TempDir dir;
  const std::string path = dir.file("race.key");
  constexpr int kProcesses = 6;
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) _exit(NodeIdentity::load_or_create(path) ? 0 : 1);
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  auto a = NodeIdentity::load_or_create(path), b = NodeIdentity::load_or_create(path);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->public_key(), b->public_key());
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);  // no temporary file left behind
}

TEST(Identity, DamagedKeyFileIsAnErrorNamingItAndIsNotOverwritten) {
  TempDir dir;
  const std::string path = dir.file("node.key");
  std::ofstream(path) << "not a key\n";
  auto id = NodeIdentity::load_or_create(path);
  ASSERT_FALSE(id);
  EXPECT_EQ(id.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(id.status().message().find(path), std::string::npos);
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "not a key");
}

TEST(Identity, PublicKeyHexRoundTripsAndRejectsGarbage) {
  const NodeIdentity a = NodeIdentity::generate();
  auto back = parse_public_key("  " + a.public_key_hex() + "\n");
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, a.public_key());
  EXPECT_FALSE(parse_public_key(a.public_key_hex().substr(2)));
  EXPECT_FALSE(parse_public_key(std::string(64, 'g')));
}

TEST(TrustList, FileListsKeysWithCommentsAndReportsTheBadLine) {
  TempDir dir;
  const NodeIdentity self = NodeIdentity::generate(), peer = NodeIdentity::generate(), stranger = NodeIdentity::generate();
  const std::string good = dir.file("trust.txt");
  std::ofstream(good) << "# peers we trust\n\n" << peer.public_key_hex() << "  # node b\n";
  TrustList trust(self.public_key());
  ASSERT_TRUE(trust.add_file(good));
  EXPECT_TRUE(trust.trusts(self.public_key()));
  EXPECT_TRUE(trust.trusts(peer.public_key()));
  EXPECT_FALSE(trust.trusts(stranger.public_key()));

  const std::string bad = dir.file("bad.txt");
  std::ofstream(bad) << peer.public_key_hex() << "\nxyz\n";
  const Status s = TrustList().add_file(bad);
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find(bad + ":2"), std::string::npos) << s.message();
  EXPECT_FALSE(TrustList().add_file(dir.file("missing.txt")));
}

}  // namespace
}  // namespace kvstash::identity
