// The router's /metrics page as a Prometheus scraper reads it: every sample's family was declared
// by a TYPE line, and a family's samples stand together (with two workers the per-worker families
// were interleaved: a scrape of such a page fails).
#include "router/metrics.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

namespace kvstash::router {
namespace {

// The metric name a sample line belongs to: histograms' _bucket/_sum/_count belong to their family.
std::string family_of(const std::string& sample, const std::set<std::string>& declared) {
  std::string name = sample.substr(0, sample.find_first_of("{ "));
  if (declared.count(name)) return name;
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    const std::string s(suffix);
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      const std::string base = name.substr(0, name.size() - s.size());
      if (declared.count(base)) return base;
    }
  }
  return name;
}

TEST(RouterMetrics, EachFamilyIsDeclaredAndContiguous) {
  RouterMetrics metrics;
  metrics.count_request("http://w1", "cache_hit");
  metrics.count_request("http://w2\"x", "least_load");
  metrics.count_response("http://w1", 200);
  std::vector<WorkerStatus> workers(2);
  workers[0].url = "http://w1";
  workers[0].up = true;
  workers[0].load_tokens = -1;
  workers[1].url = "http://w2";
  workers[1].draining = true;
  const std::string page = metrics.render(workers, {});
  std::set<std::string> declared, finished;
  std::string current;
  std::map<std::string, int> samples;
  std::istringstream lines(page);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(declared.insert(name).second) << "declared twice: " << name;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const std::string family = family_of(line, declared);
    ASSERT_TRUE(declared.count(family)) << "no TYPE before: " << line;
    if (family != current) {
      EXPECT_FALSE(finished.count(family)) << "samples of " << family << " interleaved with another family";
      if (!current.empty()) finished.insert(current);
      current = family;
    }
    ++samples[family];
  }
  EXPECT_EQ(samples["kvstash_router_worker_up"], 2);
  EXPECT_EQ(samples["kvstash_router_worker_kv_keys"], 6);
  EXPECT_NE(page.find("kvstash_router_worker_up{worker=\"http://w1\"} 1\n"), std::string::npos) << page;
  EXPECT_NE(page.find("kvstash_router_worker_load_tokens{worker=\"http://w1\"} -1\n"), std::string::npos) << page;
  EXPECT_NE(page.find("kvstash_router_requests_total{worker=\"http://w2\\\"x\",decision=\"least_load\"} 1\n"),
            std::string::npos)
      << page;
}

}  // namespace
}  // namespace kvstash::router
