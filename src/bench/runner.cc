#include "bench/runner.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "bench/arrival.h"

namespace kvstash::bench {
namespace {

using Clock = std::chrono::steady_clock;

// How often the progress callback is called.
constexpr auto kProgressInterval = std::chrono::milliseconds(200);

Clock::time_point after(Clock::time_point t, double seconds) {
  return t + std::chrono::microseconds(static_cast<std::int64_t>(seconds * 1e6));
}

// State shared by the workers of one phase (warm-up or measured run).
class Phase {
 public:
  Phase(const Workload& workload, const LoadOptions& load, std::int64_t max_requests, bool first_round_only)
      : workload_(workload), load_(load), max_requests_(max_requests), first_round_only_(first_round_only),
        start_(Clock::now()), arrivals_(load.rate, load.burstiness, load.seed) {}

  void run(const Endpoint& endpoint, const ClientOptions& client_options) {
    std::vector<std::thread> workers;
    for (int i = 0; i < std::max(1, load_.concurrency); ++i) {
      workers.emplace_back([&] { worker(endpoint, client_options); });
    }
    for (auto& w : workers) w.join();
    std::sort(records_.begin(), records_.end(),
              [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
  }

  Clock::time_point start() const { return start_; }
  std::int64_t finished() const { return finished_.load(); }
  std::int64_t errors() const { return errors_.load(); }
  std::vector<RequestRecord>& records() { return records_; }

 private:
  bool past_duration(Clock::time_point now) const {
    return load_.duration_s >= 0 && now >= after(start_, load_.duration_s);
  }

  // Claims the next session and its start time; false when the run is over.
  bool claim_session(std::int64_t& index, Clock::time_point& start_at) {
    std::lock_guard<std::mutex> lock(mu_);
    if (past_duration(Clock::now())) return false;
    if (next_session_ >= workload_.size() && workload_.size() >= 0) return false;
    if (max_requests_ >= 0 && sent_.load() >= max_requests_) return false;
    index = next_session_++;
    double offset = 0;
    if (workload_.timed()) {
      const auto session = workload_.session(index);
      offset = session ? session->timestamp_s : 0;
    } else {
      offset = arrivals_.next_arrival_s();
    }
    start_at = after(start_, offset);
    return true;
  }

  // Claims one request of the budget; false when it is spent or the duration is over.
  bool claim_request(std::int64_t& index) {
    if (past_duration(Clock::now())) return false;
    const std::int64_t i = sent_.fetch_add(1);
    if (max_requests_ >= 0 && i >= max_requests_) return false;
    index = i;
    return true;
  }

  void worker(const Endpoint& endpoint, const ClientOptions& client_options) {
    OpenAiClient client(endpoint, client_options);
    std::int64_t session_index;
    Clock::time_point start_at;
    while (claim_session(session_index, start_at)) {
      if (load_.duration_s >= 0 && start_at >= after(start_, load_.duration_s)) return;
      std::this_thread::sleep_until(start_at);
      auto session = workload_.session(session_index);
      if (!session) return;
      run_session(client, *session);
    }
  }

  void run_session(OpenAiClient& client, const Session& session) {
    std::vector<ChatMessage> history = session.messages;
    const int max_tokens = load_.max_tokens > 0 ? load_.max_tokens : session.max_tokens;
    const int rounds = first_round_only_ ? 1 : session.num_rounds();
    for (int round = 0; round < rounds; ++round) {
      std::int64_t index;
      if (!claim_request(index)) return;
      const std::string& key_prefix = client.options().prompt_cache_key_prefix;
      RequestRecord record =
          client.stream(history, max_tokens, start_, key_prefix.empty() ? "" : key_prefix + std::to_string(session.id));
      record.index = index;
      record.session_id = session.id;
      record.label = session.label;
      record.round = round;
      const bool ok = record.ok();
      if (ok && round + 1 < rounds) {
        history.push_back({"assistant", record.output_text});
        history.push_back({"user", session.follow_ups[static_cast<std::size_t>(round)]});
      }
      if (!ok) errors_.fetch_add(1);
      {
        std::lock_guard<std::mutex> lock(mu_);
        records_.push_back(std::move(record));
      }
      finished_.fetch_add(1);
      if (!ok) return;  // the next round would need this answer
    }
  }

  const Workload& workload_;
  const LoadOptions& load_;
  const std::int64_t max_requests_;
  const bool first_round_only_;
  const Clock::time_point start_;  // set at construction, so the progress thread may read it
  std::atomic<std::int64_t> sent_{0};
  std::atomic<std::int64_t> finished_{0};
  std::atomic<std::int64_t> errors_{0};
  std::mutex mu_;
  // Guarded by mu_:
  ArrivalSchedule arrivals_;
  std::int64_t next_session_ = 0;
  std::vector<RequestRecord> records_;
};

// Calls on_progress every kProgressInterval while `phase` runs, and once more at the end.
class ProgressReporter {
 public:
  ProgressReporter(const ProgressCallback& callback, Progress base, const Phase& phase)
      : callback_(callback), base_(base), phase_(phase) {
    if (callback_) thread_ = std::thread([this] { loop(); });
  }
  ~ProgressReporter() {
    if (!callback_) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    report(/*final=*/true);
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!wake_.wait_for(lock, kProgressInterval, [this] { return stop_; })) report(false);
  }
  void report(bool final) {
    Progress p = base_;
    p.finished = phase_.finished();
    p.errors = phase_.errors();
    p.elapsed_s = std::chrono::duration<double>(Clock::now() - phase_.start()).count();
    p.final = final;
    callback_(p);
  }

  const ProgressCallback& callback_;
  Progress base_;
  const Phase& phase_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

std::vector<RequestRecord> run_load(const Workload& workload, const Workload* warmup, int warmup_requests,
                                    const Endpoint& endpoint, const ClientOptions& client_options,
                                    const LoadOptions& load, const ProgressCallback& on_progress,
                                    const std::function<void()>& before_measured) {
  if (warmup != nullptr && warmup_requests > 0) {
    // Warm-up goes as fast as the concurrency allows: it is not measured, only has to happen.
    LoadOptions warm = load;
    warm.rate = 0;
    warm.duration_s = -1;
    Phase phase(*warmup, warm, warmup_requests, /*first_round_only=*/true);
    Progress base;
    base.total = warmup_requests;
    base.warming_up = true;
    ProgressReporter reporter(on_progress, base, phase);
    phase.run(endpoint, client_options);
  }
  if (before_measured) before_measured();
  std::int64_t total = workload.total_requests();
  if (load.max_requests >= 0) total = total < 0 ? load.max_requests : std::min(total, load.max_requests);
  Phase phase(workload, load, load.max_requests, /*first_round_only=*/false);
  Progress base;
  base.total = load.duration_s >= 0 ? -1 : total;
  base.duration_s = load.duration_s;
  {
    ProgressReporter reporter(on_progress, base, phase);
    phase.run(endpoint, client_options);
  }
  return std::move(phase.records());
}

}  // namespace kvstash::bench
