// The tcp provider: "tcp://HOST:PORT[?busy_poll=1][&latency_us=L&gbytes_s=R]" (port 0: ephemeral;
// IPv4 or [IPv6]; latency_us / gbytes_s: an emulated link in front of the listener, link_emu.h).
//
// One listening socket per provider, and one background progress thread that sleeps in
// epoll_wait. That thread
//   - accepts connections and reads their Hello without blocking (strangers that say nothing
//     or say garbage are dropped after kHelloTimeout; at most kMaxStrangers are kept, the
//     oldest is dropped first), and hands matched sockets to their endpoint;
//   - serves endpoints nobody polls: one-sided requests, heartbeats, liveness. It leaves an
//     endpoint alone while a caller progresses it (Conn::caller_active) and never spins:
//     endpoint sockets are armed EPOLLONESHOT and re-armed after service.
// Thread safety: every method is thread-safe. Lock order: mu_ -> Conn::connect_mu_.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "lattice/crypto/secret.h"
#include "lattice/fabric/fabric.h"
#include "lattice/fabric/tcp/address.h"
#include "lattice/fabric/tcp/cq.h"
#include "lattice/fabric/tcp/memory.h"
#include "lattice/fabric/tcp/socket.h"
#include "lattice/fabric/tcp/wire.h"

namespace lattice::fabric::tcp {

class Conn;
class LinkEmulator;

inline constexpr auto kHelloTimeout = std::chrono::seconds(5);
inline constexpr size_t kMaxStrangers = 64;

class TcpProvider final : public Provider {
 public:
  static Result<std::unique_ptr<TcpProvider>> create(std::string_view params, const ProviderOptions& options);
  ~TcpProvider() override;

  std::string_view name() const override { return "tcp"; }
  const ProviderCaps& caps() const override { return caps_; }
  Result<std::unique_ptr<MemoryRegion>> allocate_memory(size_t n_bytes, uint32_t access) override;
  Result<std::unique_ptr<MemoryRegion>> register_memory(void* data, size_t n_bytes, uint32_t access) override;
  Result<std::unique_ptr<CompletionQueue>> create_cq(size_t depth) override;
  Result<std::unique_ptr<Endpoint>> create_endpoint(CompletionQueue* send_cq, CompletionQueue* recv_cq,
                                                    const EndpointOptions& options) override;

  // For Conn.
  RegionTable& regions() { return *regions_; }
  int epoll_fd() const { return loop_.epoll_fd; }
  void add_connected(const std::shared_ptr<Conn>& conn, int fd);
  void forget(const Conn* conn);
  const EndpointAddress& listen_address() const { return listen_addr_; }
  // The cluster secret when connections are sealed (handshake + AEAD), else nullopt.
  const std::optional<crypto::ClusterSecret>& secret() const { return secret_; }

 private:
  struct Stranger {
    int fd;
    std::string peer_text;
    Clock::time_point expires;
    Hello hello;
    size_t got = 0;
  };
  TcpProvider() = default;
  void run();
  void accept_all();
  void serve_stranger(uint64_t id);
  void drop_stranger(uint64_t id, const std::string& why);
  Clock::time_point housekeeping(Clock::time_point now);

  ProviderCaps caps_;
  bool busy_poll_ = false;
  Clock::duration cq_spin_ = TcpCompletionQueue::kSpin;  // how long a CQ's wait() polls before it sleeps
  std::optional<crypto::ClusterSecret> secret_;
  std::shared_ptr<RegionTable> regions_ = std::make_shared<RegionTable>();
  int listen_fd_ = -1;
  ListenLoop loop_;  // the background thread's epoll set: wake-up eventfd and listener
  EndpointAddress listen_addr_;
  std::thread thread_;
  std::atomic<bool> stop_{false};

  std::mutex mu_;
  uint64_t next_id_ = 16;  // ids 0..15 are reserved for the listener and the wake-up fd
  std::unordered_map<uint64_t, std::weak_ptr<Conn>> conns_;      // created endpoints, by id
  std::unordered_map<uint64_t, std::shared_ptr<Conn>> active_;   // connected, in epoll
  std::unordered_map<uint64_t, Stranger> strangers_;
  std::vector<std::pair<uint64_t, Clock::time_point>> deferred_;  // background thread only
  std::unique_ptr<LinkEmulator> link_emu_;  // "?latency_us=&gbytes_s=": the relay peers dial
};

}  // namespace lattice::fabric::tcp
