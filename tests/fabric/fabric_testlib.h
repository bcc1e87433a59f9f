// Helpers shared by the fabric suites: the one list of providers every suite runs against,
// endpoint pairs whose ranks are threads of this process, and a pump that drives both sides
// from one thread.
#pragma once

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lattice/fabric/fabric.h"

namespace lattice::fabric::testing {

// Every provider the conformance and process suites run against. Add a URI here (e.g. the
// verbs emulator) and every suite picks it up; a provider that answers kUnavailable is skipped.
const std::vector<std::string>& provider_uris();
// gtest-safe name of a URI: "tcp://127.0.0.1:0" -> "tcp_127_0_0_1_0".
std::string uri_test_name(const ::testing::TestParamInfo<std::string>& info);

// One rank: a provider, its completion queues and one endpoint.
struct Side {
  std::unique_ptr<Provider> provider;
  std::unique_ptr<CompletionQueue> send_cq;
  std::unique_ptr<CompletionQueue> recv_cq;
  std::unique_ptr<Endpoint> ep;
  ~Side();  // endpoint first, then queues, then the provider (fabric.h's order)
};

// Creates a side (no connect). kUnavailable when the provider is not built.
Result<std::unique_ptr<Side>> make_side(const std::string& uri, const EndpointOptions& options = {},
                                        const ProviderOptions& provider_options = {});
// Connects two sides, each connect() on its own thread (a provider may block in connect
// until its peer connects too).
Status connect_pair(Side& a, Side& b, Deadline deadline);

struct Pair {
  std::unique_ptr<Side> a;
  std::unique_ptr<Side> b;
};
// Two connected sides, peer ranks 0 (a) and 1 (b).
Result<Pair> make_pair(const std::string& uri, EndpointOptions options = {});

// `n` messages of `len` bytes from a to b of a fresh pair (each receive posted first): the
// receive statuses in completion order and whether every completed payload was intact.
struct FaultRun {
  std::unique_ptr<MemoryRegion> src, dst;  // outlive the pair: a failed run may leave sends posted
  Pair pair;
  std::vector<Status> recv_status;
  bool data_ok = true;
};
FaultRun run_faulty(const std::string& uri, int n, size_t len = 1000);

// Polls a set of queues round-robin, keeping completions per queue, so one thread can drive
// both ends of a pair whatever provider progresses where.
class Pump {
 public:
  explicit Pump(std::vector<CompletionQueue*> cqs) : cqs_(std::move(cqs)) {}
  // The next completion of `cq`; kTimeout after the deadline. Keeps polling the others.
  Result<Completion> next(CompletionQueue* cq, Deadline deadline);
  // Polls every queue once.
  void poll_all();

 private:
  std::vector<CompletionQueue*> cqs_;
  std::map<CompletionQueue*, std::deque<Completion>> pending_;
};

// Bytes with a pattern that differs per seed and per position (never all-zero runs).
std::vector<std::byte> pattern(size_t n, uint32_t seed);
void fill_pattern(std::byte* dst, size_t n, uint32_t seed);

// A generous liveness deadline for a loaded 2-core machine.
inline Deadline generous() { return Deadline::after(std::chrono::seconds(20)); }

std::string hex_encode(const std::vector<std::byte>& bytes);
std::vector<std::byte> hex_decode(const std::string& hex);

}  // namespace lattice::fabric::testing
