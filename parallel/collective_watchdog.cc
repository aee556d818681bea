#include "parallel/collective_watchdog.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "parallel/fatal.h"
#include "parallel/process_identity.h"

namespace multiscreen {
namespace {

constexpr int kInquiryTag = 1;
constexpr int kAnswerTag = 2;

// A snapshot on the wire (plain bytes; every rank runs the same build).
struct Wire {
  int64_t step = 0, steps_here = 0;
  int32_t phase = 0, waiting = 0, collective = 0, pad = 0;
  double phase_seconds = 0, wait_seconds = 0;
};

Wire ToWire(const progress::Snapshot& s) {
  return {s.step, s.steps_here, int32_t(s.phase), s.waiting ? 1 : 0, int32_t(s.collective), 0, s.phase_seconds,
          s.wait_seconds};
}

progress::Snapshot FromWire(const Wire& w) {
  progress::Snapshot s;
  s.step = w.step;
  s.steps_here = w.steps_here;
  s.phase = w.phase >= 0 && w.phase < progress::kNumPhases ? progress::Phase(w.phase) : progress::Phase::kStartUp;
  s.phase_seconds = w.phase_seconds;
  s.waiting = w.waiting != 0;
  s.collective = progress::Collective(std::clamp(w.collective, 0, int32_t(progress::kLastCollective)));
  s.wait_seconds = w.wait_seconds;
  return s;
}

progress::Snapshot Now() { return progress::Read(progress::Self(), progress::MonotonicNs()); }

// Why `r` did not arrive, in words.
std::string Absence(const RankReport& r) {
  if (r.answered) return absl::StrCat("busy outside any collective: ", progress::Describe(r.snapshot));
  std::string out = r.process_state.empty() ? "not answering (stopped, hung, or its host unreachable)"
                                            : absl::StrCat("not answering: ", r.process_state);
  if (r.beacon_read) absl::StrAppend(&out, ", its last mark: ", progress::Describe(r.snapshot));
  return out;
}

}  // namespace

std::string RankList(const std::vector<int>& ranks) {
  std::vector<int> shown(ranks.begin(), ranks.begin() + std::min<size_t>(ranks.size(), 8));
  std::string out = absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(shown, ", "));
  if (ranks.size() > shown.size()) absl::StrAppend(&out, " and ", ranks.size() - shown.size(), " more");
  return out;
}

std::string DescribeCollectiveTimeout(const CollectiveTimeout& timeout, int reporter,
                                      const std::vector<RankReport>& ranks) {
  std::vector<int> waiters;
  std::vector<const RankReport*> absent;
  for (const RankReport& r : ranks) {
    if (r.answered && r.snapshot.waiting) {
      waiters.push_back(r.rank);
    } else {
      absent.push_back(&r);
    }
  }
  const progress::Snapshot& me = ranks.at(reporter).snapshot;
  const double limit_s = timeout.LimitFor(me);
  const std::string limit =
      limit_s > timeout.seconds
          ? absl::StrFormat("limit %g s: %g × --collective_timeout in start-up, the first step, checkpoints and "
                            "validation", limit_s, timeout.long_factor)
          : absl::StrFormat("limit %g s, --collective_timeout", limit_s);
  std::string line = "collective timeout: ";
  if (absent.empty()) {
    // Everyone answered from inside a collective: they wait on each other.
    std::vector<std::string> each;
    for (const RankReport& r : ranks) {
      each.push_back(absl::StrCat(r.rank, " in ", progress::CollectiveName(r.snapshot.collective), " (",
                                  progress::Describe(r.snapshot), ")"));
    }
    if (each.size() > 8) {
      const size_t more = each.size() - 8;
      each.resize(8);
      each.push_back(absl::StrCat("and ", more, " more"));
    }
    absl::StrAppend(&line, "every rank waits in a collective (", limit, "): ranks ", absl::StrJoin(each, "; "),
                    "; they called different operations or wait on each other; ending the job");
    return line;
  }
  absl::StrAppendFormat(&line, "%s waited %.1f s in %s (%s; %s); ", RankList(waiters), me.wait_seconds,
                        progress::CollectiveName(me.collective), progress::Describe(me, false), limit);
  std::vector<std::string> each;
  for (size_t i = 0; i < absent.size() && i < 4; ++i) {
    const RankReport& r = *absent[i];
    each.push_back(absl::StrCat("rank ", r.rank, " (", r.host, ", pid ", r.pid, ") ", Absence(r)));
  }
  if (absent.size() > 4) each.push_back(absl::StrCat("and ", absent.size() - 4, " more ranks"));
  absl::StrAppend(&line, "it waits for ", absl::StrJoin(each, "; "), "; ending the job");
  return line;
}

class CollectiveWatchdog::Impl {
 public:
  Impl(MPI_Comm comm, std::vector<ProcessIdentity> ids, CollectiveTimeout timeout) : comm_(comm), ids_(std::move(ids)) {
    MS_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MS_MPI_CHECK(MPI_Comm_size(comm_, &size_));
    SetTimeout(timeout);
    peer_beacons_.assign(size_, nullptr);
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && ids_[r].beacon_fd >= 0 && SamePidSpace(ids_[r], ids_[rank_])) peer_beacons_[r] = MapBeacon(ids_[r]);
    }
    answer_out_.resize(size_);
    MS_MPI_CHECK(MPI_Irecv(&inquiry_in_, sizeof(Wire), MPI_BYTE, MPI_ANY_SOURCE, kInquiryTag, comm_, &inquiry_req_));
    thread_ = std::thread([this] { Loop(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
    MPI_Cancel(&inquiry_req_);
    MPI_Wait(&inquiry_req_, MPI_STATUS_IGNORE);
    for (MPI_Request& r : sends_) MPI_Wait(&r, MPI_STATUS_IGNORE);
    for (const progress::Beacon* b : peer_beacons_) {
      if (b != nullptr) ::munmap(const_cast<progress::Beacon*>(b), sizeof(progress::Beacon));
    }
    MPI_Comm_free(&comm_);
  }

  // The limits, and the poll and answer window that follow from them.
  void SetTimeout(CollectiveTimeout timeout) {
    std::lock_guard<std::mutex> lock(mutex_);
    timeout_ = timeout;
    poll_ = std::clamp(timeout.seconds / 20, 0.02, 1.0);
    window_ = std::clamp(timeout.seconds / 4, 1.0, 10.0);
  }

 private:
  struct Limits {
    CollectiveTimeout timeout;
    double poll, window;
  };
  Limits Current() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {timeout_, poll_, window_};
  }

  // A same-node peer's beacon, read-only, or nullptr where /proc does not let us open it.
  static const progress::Beacon* MapBeacon(const ProcessIdentity& id) {
    const std::string path = absl::StrCat("/proc/", id.pid, "/fd/", id.beacon_fd);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nullptr;
    void* p = ::mmap(nullptr, sizeof(progress::Beacon), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    return p == MAP_FAILED ? nullptr : static_cast<const progress::Beacon*>(p);
  }

  // Sleeps `seconds`, or less when stopped; false once stopped.
  bool Sleep(double seconds) {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return stop_; });
    return !stop_;
  }

  // Answers every inquiry that arrived, and retires finished sends.
  void Serve() {
    for (;;) {
      int arrived = 0;
      MPI_Status status;
      MS_MPI_CHECK(MPI_Test(&inquiry_req_, &arrived, &status));
      if (!arrived) break;
      const int from = status.MPI_SOURCE;
      answer_out_[from] = ToWire(Now());
      MPI_Request send;
      MS_MPI_CHECK(MPI_Isend(&answer_out_[from], sizeof(Wire), MPI_BYTE, from, kAnswerTag, comm_, &send));
      sends_.push_back(send);
      MS_MPI_CHECK(MPI_Irecv(&inquiry_in_, sizeof(Wire), MPI_BYTE, MPI_ANY_SOURCE, kInquiryTag, comm_, &inquiry_req_));
    }
    for (size_t i = 0; i < sends_.size();) {
      int done = 0;
      MS_MPI_CHECK(MPI_Test(&sends_[i], &done, MPI_STATUS_IGNORE));
      if (done) {
        sends_.erase(sends_.begin() + long(i));
      } else {
        ++i;
      }
    }
  }

  void Loop() {
    double defer_until = 0;  // seconds on the monotonic clock
    bool deferred = false;
    double last = Seconds(), resumed = 0;
    while (Sleep(Current().poll)) {
      const Limits now_limits = Current();
      const CollectiveTimeout& timeout = now_limits.timeout;
      Serve();
      const double now = Seconds();
      // A pass that took far longer than the poll: this process was stopped (SIGSTOP, a
      // debugger). Its waits are timed from now, or a rank resumed after the job's end
      // (or after a pause its peers rode out) would blame the others for its own stop.
      if (now - last > now_limits.poll + 2) resumed = now;
      last = now;
      const progress::Snapshot me = Now();
      if (!me.waiting) deferred = false;
      const double waited = std::min(me.wait_seconds, now - resumed);
      if (!me.waiting || waited <= timeout.LimitFor(me) || now < defer_until) continue;
      const int64_t since = progress::Self().wait_since_ns.load();
      const std::vector<RankReport> ranks = Inquire(now_limits.window);
      // A rank that answered may have just resumed (a debugger's pause): its collective
      // completes within moments. Given one second; a completed wait is no timeout.
      if (!Sleep(1.0)) return;
      if (!StillWaiting(since)) continue;
      // The lowest waiting rank reports; one that waits above us is given the time to.
      bool lower_reports = false;
      for (int r = 0; r < rank_; ++r) {
        const RankReport& o = ranks[r];
        if (o.answered && o.snapshot.waiting && o.snapshot.wait_seconds >= 0.5 * timeout.LimitFor(o.snapshot)) {
          lower_reports = true;
        }
      }
      if (lower_reports && !deferred) {
        deferred = true;
        defer_until = Seconds() + timeout.LimitFor(me) + 2 * now_limits.window;
        continue;
      }
      End(DescribeCollectiveTimeout(timeout, rank_, ranks), since);
    }
  }

  static double Seconds() { return 1e-9 * double(progress::MonotonicNs()); }

  // Whether this process still waits in the collective whose wait began at `since`.
  static bool StillWaiting(int64_t since) {
    const progress::Beacon& b = progress::Self();
    return b.waiting.load() > 0 && b.wait_since_ns.load() == since;
  }

  // Asks every other rank for its state; waits up to `window` seconds for the answers.
  std::vector<RankReport> Inquire(double window) {
    std::vector<RankReport> ranks(size_);
    std::vector<Wire> answers(size_);
    std::vector<MPI_Request> recvs(size_, MPI_REQUEST_NULL);
    inquiry_out_ = ToWire(Now());
    for (int r = 0; r < size_; ++r) {
      ranks[r].rank = r;
      ranks[r].host = ids_[r].host;
      ranks[r].pid = ids_[r].pid;
      if (r == rank_) continue;
      MPI_Request send;
      MS_MPI_CHECK(MPI_Isend(&inquiry_out_, sizeof(Wire), MPI_BYTE, r, kInquiryTag, comm_, &send));
      sends_.push_back(send);
      MS_MPI_CHECK(MPI_Irecv(&answers[r], sizeof(Wire), MPI_BYTE, r, kAnswerTag, comm_, &recvs[r]));
    }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(window);
    for (;;) {
      Serve();  // another waiting rank may be asking us at the same time
      int all = 0;
      MS_MPI_CHECK(MPI_Testall(size_, recvs.data(), &all, MPI_STATUSES_IGNORE));
      if (all || std::chrono::steady_clock::now() > give_up || !Sleep(0.01)) break;
    }
    for (int r = 0; r < size_; ++r) {
      RankReport& o = ranks[r];
      if (r == rank_) {
        o.answered = true;
        o.snapshot = Now();
        continue;
      }
      int done = 0;
      MS_MPI_CHECK(MPI_Test(&recvs[r], &done, MPI_STATUS_IGNORE));
      if (done) {
        o.answered = true;
        o.snapshot = FromWire(answers[r]);
        continue;
      }
      MPI_Cancel(&recvs[r]);
      MPI_Wait(&recvs[r], MPI_STATUS_IGNORE);
      if (SamePidSpace(ids_[r], ids_[rank_])) o.process_state = ProcessStateInWords(ids_[r].pid);
      if (peer_beacons_[r] != nullptr) {
        o.beacon_read = true;
        o.snapshot = progress::Read(*peer_beacons_[r], progress::MonotonicNs());
      }
    }
    return ranks;
  }

  // Hands the verdict to a waiter that can leave its wait (NCCL aborts its communicator
  // and ends the job with it); ends the job here when none takes it. Returns (the
  // verdict withdrawn) when the wait that began at `since` ended meanwhile.
  void End(const std::string& line, int64_t since) {
    if (progress::VerdictTakerWaiting()) {
      progress::PostVerdict(line);
      for (int i = 0; i < 200 && !progress::VerdictTaken(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (progress::VerdictTaken()) {
        std::this_thread::sleep_for(std::chrono::seconds(20));  // the taker ends the job
      } else if (!StillWaiting(since) && progress::WithdrawVerdict()) {
        return;
      }
    }
    if (!StillWaiting(since)) return;
    FatalError(line);
  }

  MPI_Comm comm_;
  std::vector<ProcessIdentity> ids_;
  CollectiveTimeout timeout_;  // with poll_ and window_, under mutex_ (SetTimeout)
  int rank_ = 0, size_ = 1;
  std::vector<const progress::Beacon*> peer_beacons_;  // same-node peers' beacons (nullptr: none)
  double poll_ = 1, window_ = 5;
  Wire inquiry_in_, inquiry_out_;
  std::vector<Wire> answer_out_;  // one per asker: a pending send's buffer stays put
  MPI_Request inquiry_req_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> sends_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

CollectiveWatchdog::CollectiveWatchdog(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CollectiveWatchdog::~CollectiveWatchdog() = default;

void CollectiveWatchdog::SetTimeout(CollectiveTimeout timeout) { impl_->SetTimeout(timeout); }

std::unique_ptr<CollectiveWatchdog> CollectiveWatchdog::Start(MPI_Comm comm, std::vector<ProcessIdentity> ids,
                                                              CollectiveTimeout timeout) {
  int size = 1, provided = MPI_THREAD_SINGLE;
  MS_MPI_CHECK(MPI_Comm_size(comm, &size));
  MS_MPI_CHECK(MPI_Query_thread(&provided));
  if (size < 2 || provided < MPI_THREAD_MULTIPLE) {
    // Every rank got the same thread level: none starts the thread, and all say so once.
    int rank = 0;
    MS_MPI_CHECK(MPI_Comm_rank(comm, &rank));
    if (size >= 2 && rank == 0) {
      std::fprintf(stderr, "multiscreen: warning: MPI gave no MPI_THREAD_MULTIPLE: no collective timeout\n");
    }
    MPI_Comm_free(&comm);
    return nullptr;
  }
  return std::unique_ptr<CollectiveWatchdog>(
      new CollectiveWatchdog(std::make_unique<Impl>(comm, std::move(ids), timeout)));
}

}  // namespace multiscreen
