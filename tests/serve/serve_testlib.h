// For the serve tests: a tiny make-model model, `lattice serve` as a child process on a port
// it picks, and curl as the HTTP client.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "proc_testlib.h"

namespace lattice::serve::testing {

// A make-model model in a temporary directory (removed by the destructor). big: a larger
// one, slow enough that a long request takes seconds.
class TinyModel {
 public:
  explicit TinyModel(bool big = false);
  ~TinyModel();
  const std::string& path() const { return path_; }
  bool ok() const { return ok_; }

 private:
  std::string dir_, path_;
  bool ok_ = false;
};

// `lattice serve -m MODEL --port 0 ARGS...`, started and waited for ("listening on").
class ServeProc {
 public:
  Status start(const std::string& model, const std::vector<std::string>& args);
  ~ServeProc();  // SIGTERM, then reaped (SIGKILL at a deadline)
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  // SIGTERM and the exit status (raw wait status).
  Result<int> stop();
  cluster::testing::Proc& proc() { return proc_; }

 private:
  cluster::testing::Proc proc_;
  int port_ = 0;
  bool running_ = false;
};

struct HttpResult {
  int status = 0;  // 0: curl failed
  std::string body;
};
bool have_curl();
// curl -s ARGS... URL; the status and body. Every call has a 30 s deadline.
HttpResult curl(const std::string& url, const std::vector<std::string>& args = {});

// Polls /health until `n` requests are in flight and decoding (active == in_flight == n); false
// at the deadline (30 s).
bool wait_decoding(const std::string& base_url, int n);

// `n` streams of `tokens` tokens each from the official openai npm client
// (tests/node/openai_client.mjs, streams mode) against `server`; once all of them decode (and
// 300 ms more), the server's rank `victim` is SIGKILLed. The client's report (its JSON: per
// stream the text, finish, usage, arrival times) and when the kill happened (unix ms). An error
// when the streams never all start, the rank is not found, or the client fails.
struct KilledRun {
  nlohmann::json streams;
  int64_t killed_ms = 0;
};
Result<KilledRun> streams_through_a_kill(ServeProc& server, int victim, int n, int tokens);

// The child of `launcher` started as rank `rank` (LATTICE_RANK in its environment), or -1.
pid_t rank_pid(pid_t launcher, int rank);
// The value of an unlabelled (or exactly labelled) sample in Prometheus text, or -1.
double metric(const std::string& text, const std::string& name);

}  // namespace lattice::serve::testing
