#include <future>
#include <string>
#include <thread>

#include "lattice/cluster/group.h"

namespace lattice::cluster {

namespace {

// One rank's side of an in-process full mesh: its own provider (so shm/tcp behave exactly as
// between processes), one CQ pair shared by all its endpoints, one endpoint per peer.
class LocalGroup final : public Group {
 public:
  LocalGroup(int rank, int world) : rank_(rank), world_(world), links_(world) {}

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  uint64_t epoch() const override { return 0; }
  std::span<const Link> links(int peer) const override {
    if (peer < 0 || peer >= world_ || peer == rank_) return {};
    return {&links_[peer], 1};
  }
  std::span<fabric::Provider* const> providers() const override { return provider_list_; }

  // Built in order: provider, queues, endpoints; destroyed in reverse (members below).
  std::unique_ptr<fabric::Provider> provider_;
  std::unique_ptr<fabric::CompletionQueue> send_cq_, recv_cq_;
  std::vector<std::unique_ptr<fabric::Endpoint>> endpoints_;
  std::vector<fabric::Provider*> provider_list_;
  int rank_, world_;
  std::vector<Link> links_;

  ~LocalGroup() override {
    endpoints_.clear();
    send_cq_.reset();
    recv_cq_.reset();
  }
};

class SingleGroup final : public Group {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  uint64_t epoch() const override { return 0; }
  std::span<const Link> links(int) const override { return {}; }
  std::span<fabric::Provider* const> providers() const override { return {}; }
};

}  // namespace

std::unique_ptr<Group> make_single_group() { return std::make_unique<SingleGroup>(); }

Result<std::vector<std::unique_ptr<Group>>> make_local_groups(int world_size, std::string_view provider_uri,
                                                              Deadline deadline,
                                                              const fabric::EndpointOptions& options) {
  if (world_size < 1 || world_size > 64)
    return InvalidArgument("world size " + std::to_string(world_size) + " out of range 1..64");
  std::vector<std::unique_ptr<LocalGroup>> groups;
  for (int r = 0; r < world_size; ++r) {
    auto g = std::make_unique<LocalGroup>(r, world_size);
    LATTICE_ASSIGN_OR_RETURN(g->provider_, fabric::make_provider(provider_uri));
    g->provider_list_ = {g->provider_.get()};
    LATTICE_ASSIGN_OR_RETURN(g->send_cq_, g->provider_->create_cq(4096));
    LATTICE_ASSIGN_OR_RETURN(g->recv_cq_, g->provider_->create_cq(4096));
    g->endpoints_.resize(world_size);
    for (int p = 0; p < world_size; ++p) {
      if (p == r) continue;
      fabric::EndpointOptions o = options;
      o.peer_rank = p;
      LATTICE_ASSIGN_OR_RETURN(g->endpoints_[p], g->provider_->create_endpoint(g->send_cq_.get(), g->recv_cq_.get(), o));
      g->links_[p] = Link{g->endpoints_[p].get(), g->provider_.get(), g->send_cq_.get(), g->recv_cq_.get()};
    }
    groups.push_back(std::move(g));
  }
  // Both sides of a pair call connect(); run each pair's two calls concurrently.
  std::vector<std::future<Status>> pending;
  for (int a = 0; a < world_size; ++a) {
    for (int b = a + 1; b < world_size; ++b) {
      auto* ea = groups[a]->endpoints_[b].get();
      auto* eb = groups[b]->endpoints_[a].get();
      auto addr_a = ea->local_address(), addr_b = eb->local_address();
      pending.push_back(std::async(std::launch::async, [=] { return ea->connect(addr_b, deadline); }));
      pending.push_back(std::async(std::launch::async, [=] { return eb->connect(addr_a, deadline); }));
    }
  }
  Status first;
  for (auto& f : pending) {
    Status s = f.get();
    if (first.ok() && !s.ok()) first = s.with_context("local group connect");
  }
  if (!first.ok()) return first;
  std::vector<std::unique_ptr<Group>> out;
  for (auto& g : groups) out.push_back(std::move(g));
  return out;
}

}  // namespace lattice::cluster
