#include "lattice/cluster/cluster.h"

#include <cstdio>
#include <unistd.h>

#include <cstdlib>
#include <future>
#include <mutex>
#include <thread>

#include "lattice/cluster/control.h"
#include "lattice/cluster/rank_env.h"
#include "lattice/cluster/topology_links.h"
#include "lattice/core/log.h"

namespace lattice::cluster {

using nlohmann::json;

namespace {

std::mutex g_state_mu;  // guards Cluster::state_ swaps against the heartbeat thread's reads

// A fabric endpoint whose peer the membership may declare dead: from then on every post and
// status() answers kPeerLost at once, without waiting for the provider's own timeout, and the
// provider (which reads the same flag, EndpointOptions::declared_lost) fails the outstanding
// operations at its next poll. A rank that lost the coordinator or was evicted is fenced:
// every one of its links is lost at once.
class GuardedEndpoint final : public fabric::Endpoint {
 public:
  GuardedEndpoint(std::unique_ptr<fabric::Endpoint> inner, const std::atomic<bool>* lost,
                  const std::atomic<bool>* fenced, uint64_t epoch)
      : inner_(std::move(inner)), lost_(lost), fenced_(fenced), epoch_(epoch) {}
  std::vector<std::byte> local_address() const override { return inner_->local_address(); }
  Status connect(std::span<const std::byte> a, Deadline d) override { return inner_->connect(a, d); }
  Status post_send(fabric::LocalSlice s, fabric::WorkId id) override {
    LATTICE_RETURN_IF_ERROR(check());
    return inner_->post_send(s, id);
  }
  Status post_recv(fabric::LocalSlice s, fabric::WorkId id) override {
    LATTICE_RETURN_IF_ERROR(check());
    return inner_->post_recv(s, id);
  }
  Status post_write(fabric::LocalSlice s, fabric::RemoteSlice d, fabric::WorkId id) override {
    LATTICE_RETURN_IF_ERROR(check());
    return inner_->post_write(s, d, id);
  }
  Status post_write_with_imm(fabric::LocalSlice s, fabric::RemoteSlice d, uint32_t imm, fabric::WorkId id) override {
    LATTICE_RETURN_IF_ERROR(check());
    return inner_->post_write_with_imm(s, d, imm, id);
  }
  Status post_read(fabric::LocalSlice d, fabric::RemoteSlice s, fabric::WorkId id) override {
    LATTICE_RETURN_IF_ERROR(check());
    return inner_->post_read(d, s, id);
  }
  Status post_fetch_add(fabric::LocalSlice r, fabric::RemoteSlice t, uint64_t add, fabric::WorkId id) override {
    LATTICE_RETURN_IF_ERROR(check());
    return inner_->post_fetch_add(r, t, add, id);
  }
  Status post_compare_swap(fabric::LocalSlice r, fabric::RemoteSlice t, uint64_t e, uint64_t d,
                           fabric::WorkId id) override {
    LATTICE_RETURN_IF_ERROR(check());
    return inner_->post_compare_swap(r, t, e, d, id);
  }
  // Always forwarded, lost peer or not: the caller is about to free the memory.
  Status release_buffer(fabric::WorkId id) override { return inner_->release_buffer(id); }
  // A lost peer's memory is not mapped anew; a mapping made before stays valid (the caller's
  // polls notice the loss through status()).
  Result<std::unique_ptr<fabric::RemoteMapping>> map_remote(fabric::RemoteSlice s, uint32_t access) override {
    LATTICE_RETURN_IF_ERROR(check());
    return inner_->map_remote(s, access);
  }
  Status status() const override {
    LATTICE_RETURN_IF_ERROR(check());
    return inner_->status();
  }
  int peer_rank() const override { return inner_->peer_rank(); }
  fabric::LinkBytes link_bytes() const override { return inner_->link_bytes(); }

 private:
  Status check() const {
    if (!lost_->load(std::memory_order_acquire)) return Status::Ok();
    if (fenced_->load(std::memory_order_acquire))
      return PeerLost("this rank lost the coordinator or was evicted (epoch " + std::to_string(epoch_) +
                          "): the cluster cannot take it back; it must stop",
                      inner_->peer_rank());
    return PeerLost("rank " + std::to_string(inner_->peer_rank()) + " was declared dead by the cluster (epoch " +
                        std::to_string(epoch_) + "); call shrink()",
                    inner_->peer_rank());
  }
  std::unique_ptr<fabric::Endpoint> inner_;
  const std::atomic<bool>* lost_;
  const std::atomic<bool>* fenced_;
  uint64_t epoch_;
};

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

}  // namespace

// One epoch's fabric state. Destroyed in order: endpoints, then queues.
struct Cluster::EpochState {
  uint64_t epoch = 0;
  int world = 0;
  std::unique_ptr<std::atomic<bool>[]> lost;
  std::atomic<bool> fenced{false};  // lost the coordinator or evicted: every link is lost
  std::vector<std::unique_ptr<fabric::CompletionQueue>> cqs;  // one per link (send and recv)
  std::vector<std::unique_ptr<fabric::Endpoint>> endpoints;   // by peer (GuardedEndpoint)
  std::vector<Link> links;                                    // by peer
  ~EpochState() {
    endpoints.clear();
    cqs.clear();
  }
};

Result<ClusterOptions> cluster_options_from_env(const std::string& secret_file) {
  LATTICE_ASSIGN_OR_RETURN(RankEnv e, RankEnv::from_env());
  ClusterOptions o;
  o.rank = e.rank;
  o.world_size = e.world_size;
  o.coordinator = e.coordinator;
  if (!e.topology.empty()) {
    LATTICE_ASSIGN_OR_RETURN(TopologyPlan plan, plan_from_topology_file(e.topology));
    if (plan.world_size != o.world_size)
      return InvalidArgument(e.topology + " lists " + std::to_string(plan.world_size) + " hosts but the world has " +
                             std::to_string(o.world_size) + " ranks");
    if (o.coordinator.empty()) o.coordinator = plan.coordinator;
    o.linked = plan.linked;  // only the pairs the topology cables get an endpoint
    o.link_addrs = plan.link_addrs;
    o.link_devices = plan.link_devices;
  }
  if (!e.provider.empty()) o.provider = e.provider;
  if (!cluster_provider_ok(o.provider))
    return InvalidArgument(std::string(env::kProvider) + "='" + o.provider +
                           "': use shm or tcp (emulated links: tcp?latency_us=..., verbs-emu://apple-tb5?...)");
  o.fabric_host = e.fabric_addr;
  o.insecure = e.insecure;
  o.rejoin = e.rejoin;
  // The launcher (or another process) runs the coordinator: rank 0 is then as expendable as any.
  if (e.external_coordinator) o.host_coordinator = false;
  const int hb = e.heartbeat_ms.value_or(100), ft = e.failure_timeout_ms.value_or(700);
  if (hb < 1 || ft <= hb) return InvalidArgument("need 0 < LATTICE_HEARTBEAT_MS < LATTICE_FAILURE_TIMEOUT_MS");
  const int ct = e.connect_timeout_ms.value_or(15000);
  if (ct < 1) return InvalidArgument("LATTICE_CONNECT_TIMEOUT_MS must be positive");
  o.connect_timeout = std::chrono::milliseconds(ct);
  o.membership.heartbeat_interval = std::chrono::milliseconds(hb);
  o.membership.failure_timeout = std::chrono::milliseconds(ft);
  if (o.world_size > 1 || !o.coordinator.empty()) {
    if (o.coordinator.empty())
      return InvalidArgument("rank " + std::to_string(o.rank) + " of " + std::to_string(o.world_size) +
                             ": no coordinator (set LATTICE_COORDINATOR=host:port or LATTICE_TOPOLOGY=file)");
    auto s = crypto::load_secret(secret_file);  // the file if given, else LATTICE_SECRET / LATTICE_SECRET_FILE
    if (!s.ok()) return s.status().with_context("joining a cluster needs its secret");
    o.secret = *s;
  }
  return o;
}

std::string provider_uri(std::string_view word, std::string_view host) {
  if (word == "tcp" || word.starts_with("tcp?"))
    return "tcp://" + std::string(host.empty() ? "127.0.0.1" : host) + ":0" + std::string(word.substr(3));
  return std::string(word);
}

bool cluster_provider_ok(std::string_view word) {
  return word == "shm" || word == "tcp" || word.starts_with("tcp?") || word == "verbs-emu" ||
         word.starts_with("verbs-emu://");
}

std::string Cluster::local_ip() const { return link_ ? link_->local_ip() : "127.0.0.1"; }

Cluster::~Cluster() {
  // Leave politely: the coordinator tells the others "left", not "died". The rank hosting
  // the coordinator lingers (bounded) until the others left, so their last replies are not
  // cut off by a reset connection.
  if (link_ && !dropped_ && link_->status().ok()) (void)link_->send(json{{"t", "bye"}}, Deadline::after(200ms));
  if (coordinator_) {
    auto until = Deadline::after(2s);
    while (!until.expired()) {
      auto st = coordinator_->stats();
      if (st.alive.size() <= 1) break;
      std::this_thread::sleep_for(10ms);
    }
  }
  {
    std::lock_guard lock(g_state_mu);
    state_.reset();
  }
  link_.reset();  // stops the heartbeat thread before the coordinator goes
  coordinator_.reset();
}

std::span<const Link> Cluster::links(int peer) const {
  if (!state_ || peer < 0 || peer >= world_ || peer == rank_) return {};
  const Link& l = state_->links[peer];
  if (!l.endpoint) return {};
  return {&l, 1};
}

bool Cluster::peer_alive(int peer) const {
  if (peer < 0 || peer >= world_) return false;
  return !(state_ && state_->lost && state_->lost[peer].load());
}

std::vector<int> Cluster::lost_peers() const {
  std::vector<int> out;
  for (int p = 0; p < world_; ++p)
    if (!peer_alive(p)) out.push_back(p);
  return out;
}

Result<MembershipEvent> Cluster::next_event(Deadline deadline) {
  if (!link_) return Timeout("a single-rank cluster has no events");
  return link_->next_event(deadline);
}

Status Cluster::control_status() const { return link_ ? link_->status() : Status::Ok(); }

void Cluster::pause_heartbeats(bool paused) {
  if (link_) link_->pause(paused);
}

void Cluster::drop_control() {
  dropped_ = true;
  if (link_) link_->close_now();
  coordinator_.reset();
}

void Cluster::on_internal_event(const MembershipEvent& e) {
  std::lock_guard lock(g_state_mu);
  if (!state_) return;
  if (e.kind == EventKind::kCoordinatorLost || e.kind == EventKind::kEvicted) {
    // Fenced: nobody can shrink this rank back in, so nothing it waits for will come.
    state_->fenced.store(true, std::memory_order_release);
    for (int r = 0; r < state_->world; ++r) state_->lost[r].store(true, std::memory_order_release);
    return;
  }
  if (e.kind != EventKind::kPeerLost || state_->epoch != e.epoch) return;
  // Said here, once per event (the endpoints to those ranks fail quietly): a rank that said bye
  // left, which is how every run ends; anything else is a loss.
  std::string ranks;
  for (int r : e.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
  if (e.reason.ends_with(kLeftTheCluster))
    LATTICE_LOG_INFO("cluster: rank {} left (epoch {})", ranks, e.epoch);
  else
    LATTICE_LOG_WARN("cluster: lost rank {} in epoch {}: {}", ranks, e.epoch, e.reason);
  for (int r : e.ranks)
    if (r >= 0 && r < state_->world) state_->lost[r].store(true, std::memory_order_release);
}

Result<std::vector<std::string>> Cluster::allgather(const std::string& data, Deadline deadline) {
  if (!link_) return std::vector<std::string>{data};
  uint64_t seq = ag_seq_++;
  LATTICE_RETURN_IF_ERROR(link_->send(json{{"t", "ag"}, {"epoch", epoch_}, {"seq", seq}, {"data", data}}, deadline));
  for (;;) {
    LATTICE_ASSIGN_OR_RETURN(json m, link_->wait_for({"ag_done", "ag_fail"}, deadline));
    if (m.value("epoch", uint64_t{~0ull}) != epoch_ || m.value("seq", uint64_t{~0ull}) != seq) continue;  // stale
    if (m["t"] == "ag_fail") return PeerLost("allgather failed: " + m.value("reason", std::string("?")));
    if (!m.contains("data") || !m["data"].is_array() || static_cast<int>(m["data"].size()) != world_)
      return Corrupt("allgather reply of the wrong shape");
    std::vector<std::string> out;
    for (auto& d : m["data"]) out.push_back(d.is_string() ? d.get<std::string>() : std::string());
    return out;
  }
}

bool Cluster::pair_linked(int a, int b) const {
  if (a == b || a < 0 || b < 0 || a >= world_ || b >= world_) return false;
  if (!opt_.linked) return true;
  const int oa = origins_.size() == size_t(world_) ? origins_[size_t(a)] : -1;
  const int ob = origins_.size() == size_t(world_) ? origins_[size_t(b)] : -1;
  if (oa >= 0 && ob >= 0) return opt_.linked(oa, ob);
  return !(epoch_ == 0 && !opt_.rejoin) || opt_.linked(a, b);  // as build_epoch decides
}

// Data traffic is sealed with the cluster secret (tcp; same-host shm ignores it) unless
// --insecure, which the join already announced loudly.
Result<std::unique_ptr<fabric::Provider>> Cluster::make_fabric(const std::string& host) const {
  fabric::ProviderOptions po;
  if (opt_.secret && !opt_.insecure) po.secret = opt_.secret->bytes();
  const bool bare_v6 = host.find(':') != std::string::npos && host.front() != '[';
  return fabric::make_provider(provider_uri(opt_.provider, bare_v6 ? "[" + host + "]" : host), po);
}

Result<fabric::Provider*> Cluster::cable_provider(int rank, int peer, bool first_epoch) {
  if (opt_.provider != "tcp" || !opt_.link_addrs) return provider_.get();
  // The topology's cables join hosts: a member's host is its first-epoch rank (origin).
  auto host_of = [&](int r) { return origins_[size_t(r)] >= 0 ? origins_[size_t(r)] : (first_epoch ? r : -1); };
  const int ha = host_of(rank), hb = host_of(peer);
  const std::string pair = "rank " + std::to_string(rank) + " - rank " + std::to_string(peer) + " (" +
                           (size_t(peer) < names_.size() ? names_[size_t(peer)] : "?") + ")";
  // One provider per cable end (a local address, or an RDMA device), made once and kept across
  // epochs; one that cannot be made fails the pair, said now: the peers notice this rank leaving
  // and may stop the job before it returns.
  auto keep = [&](const std::string& key, auto make, const std::string& context) -> Result<fabric::Provider*> {
    for (auto& [k, prov] : cable_providers_)
      if (k == key) return prov.get();
    auto made = make();
    if (!made.ok()) {
      Status why = made.status().with_context(context);
      LATTICE_LOG_ERROR("{}", why.to_string());
      return why;
    }
    cable_providers_.emplace_back(key, std::move(*made));
    provider_list_.push_back(cable_providers_.back().second.get());
    return cable_providers_.back().second.get();
  };
  auto [my_dev, their_dev] =
      ha >= 0 && hb >= 0 && opt_.link_devices ? opt_.link_devices(ha, hb) : std::pair<std::string, std::string>{};
  if (!my_dev.empty()) {
    // A verbs cable: the pair's endpoint is made on this end's RDMA device, whatever the
    // cable's addresses say (they steer tcp endpoints only).
    const std::string uri = verbs_device_uri(my_dev);
    LATTICE_LOG_INFO("{}: data over the topology's verbs cable, device {} ({}) here to {} there", pair, my_dev, uri,
                     their_dev);
    return keep(
        "device " + my_dev,
        [&] {
          fabric::ProviderOptions po;
          if (opt_.secret && !opt_.insecure) po.secret = opt_.secret->bytes();
          return fabric::make_provider(uri, po);
        },
        pair + ": the topology puts this end of their cable on RDMA device " + my_dev + " (" + uri +
            "), which this host cannot open (`lattice doctor` checks it; else fix a_device/b_device, or make the "
            "link tcp)");
  }
  auto [mine, theirs] = ha >= 0 && hb >= 0 ? opt_.link_addrs(ha, hb) : std::pair<std::string, std::string>{};
  if (mine.empty()) {
    LATTICE_LOG_INFO("{}: the topology gives no address for this end of their cable; its data goes over {}, "
                     "the address that reaches the coordinator (set a_addr/b_addr in the topology to steer it)",
                     pair, default_host_);
    return provider_.get();
  }
  LATTICE_LOG_INFO("{}: data over the topology's cable, {} here to {} there", pair, mine,
                   theirs.empty() ? std::string("the peer's default address") : theirs);
  if (mine == default_host_) return provider_.get();
  // (A copy: clang before 16 cannot capture a structured binding, and the fuzz preset is clang.)
  return keep(mine, [&, addr = mine] { return make_fabric(addr); },
              pair + ": the topology puts this end of their cable on " + mine +
                  ", but this host cannot listen there (is the interface up with that address? else fix "
                  "a_addr/b_addr in the topology file)");
}

Status Cluster::build_epoch(const json& plan, Deadline deadline) {
  int rank = plan.value("rank", -1), world = plan.value("world", 0);
  uint64_t epoch = plan.value("epoch", uint64_t{0});
  if (world < 1 || rank < 0 || rank >= world) return Corrupt("bad plan from the coordinator");
  // The old epoch's endpoints go first: the application was told they die with shrink().
  {
    std::lock_guard lock(g_state_mu);
    state_.reset();
  }
  rank_ = rank;
  world_ = world;
  epoch_ = epoch;
  ag_seq_ = 0;
  names_.clear();
  if (plan.contains("members") && plan["members"].is_array())
    for (auto& n : plan["members"]) names_.push_back(n.is_string() ? n.get<std::string>() : "?");
  origins_.assign(size_t(world), -1);
  if (plan.contains("origins") && plan["origins"].is_array() && plan["origins"].size() == size_t(world))
    for (int r = 0; r < world; ++r)
      if (plan["origins"][r].is_number_integer()) origins_[size_t(r)] = plan["origins"][r].get<int>();
  log::set_rank(rank);

  if (!provider_ && !opt_.control_only) {
    default_host_ = opt_.fabric_host.empty() ? local_ip() : opt_.fabric_host;
    LATTICE_ASSIGN_OR_RETURN(provider_, make_fabric(default_host_));
    provider_list_ = {provider_.get()};
  }
  auto st = std::make_shared<EpochState>();
  st->epoch = epoch;
  st->world = world;
  st->lost = std::make_unique<std::atomic<bool>[]>(world);
  for (int p = 0; p < world; ++p) st->lost[p] = false;
  st->links.resize(world);
  st->endpoints.resize(world);
  // The topology's cables join hosts, which keep their first-epoch rank (origin) through
  // shrinks and rejoins: a pair without a cable gets no endpoint in any epoch. Without origins
  // (an old coordinator) only the first epoch can follow the topology.
  const bool first_epoch = epoch == 0 && !opt_.rejoin;
  auto is_linked = [&](int a, int b) {
    if (a == b || opt_.control_only) return false;
    if (!opt_.linked) return true;
    const int oa = origins_[size_t(a)], ob = origins_[size_t(b)];
    if (oa >= 0 && ob >= 0) return opt_.linked(oa, ob);
    return !first_epoch || opt_.linked(a, b);
  };
  json addrs = json::object();
  std::vector<std::unique_ptr<fabric::Endpoint>> raw(world);
  std::vector<fabric::Provider*> prov_of(world, provider_.get());
  for (int p = 0; p < world; ++p) {
    if (!is_linked(rank, p)) continue;
    LATTICE_ASSIGN_OR_RETURN(prov_of[p], cable_provider(rank, p, first_epoch));
    fabric::Provider* prov = prov_of[p];
    LATTICE_ASSIGN_OR_RETURN(auto cq, prov->create_cq(1024));
    fabric::EndpointOptions eo;
    eo.peer_rank = p;
    eo.peer_timeout = opt_.peer_timeout;
    eo.declared_lost = &st->lost[p];
    LATTICE_ASSIGN_OR_RETURN(raw[p], prov->create_endpoint(cq.get(), cq.get(), eo));
    addrs[std::to_string(p)] = to_hex(raw[p]->local_address());
    st->cqs.push_back(std::move(cq));
  }
  LATTICE_ASSIGN_OR_RETURN(auto all, allgather(addrs.dump(), deadline));
  // Connect every link at once (both ends call connect(); sequential calls could wait on
  // each other in a cycle).
  std::vector<std::future<Status>> pending(world);
  for (int p = 0; p < world; ++p) {
    if (!raw[p]) continue;
    json theirs = json::parse(all[p], nullptr, false);
    std::string key = std::to_string(rank);
    if (theirs.is_discarded() || !theirs.is_object() || !theirs.contains(key) || !theirs[key].is_string())
      return Corrupt("rank " + std::to_string(p) + " published no endpoint address for us", p);
    LATTICE_ASSIGN_OR_RETURN(auto blob, from_hex(theirs[key].get<std::string>()));
    fabric::Endpoint* ep = raw[p].get();
    Deadline cd = deadline.min(Deadline::after(opt_.connect_timeout));
    pending[p] = std::async(std::launch::async, [ep, blob, cd] { return ep->connect(blob, cd); });
  }
  json errors = json::array();
  for (int p = 0; p < world; ++p) {
    if (!pending[p].valid()) continue;
    Status s = pending[p].get();
    if (!s.ok()) {
      std::string why = "rank " + std::to_string(rank) + " cannot reach rank " + std::to_string(p) + " (" +
                        (p < static_cast<int>(names_.size()) ? names_[p] : "?") + ") over " + std::string(prov_of[p]->name()) + ": " +
                        s.to_string();
      LATTICE_LOG_ERROR("{}", why);
      errors.push_back(why);
    }
  }
  // Everyone learns whether every link came up, so all ranks succeed or fail together.
  LATTICE_ASSIGN_OR_RETURN(auto reports, allgather(errors.dump(), deadline));
  std::string failures;
  for (auto& r : reports) {
    json e = json::parse(r, nullptr, false);
    if (!e.is_array()) continue;
    for (auto& line : e)
      if (line.is_string()) failures += (failures.empty() ? "" : "; ") + line.get<std::string>();
  }
  if (!failures.empty()) return Unavailable("epoch " + std::to_string(epoch) + " links failed: " + failures);
  size_t cq_i = 0;
  for (int p = 0; p < world; ++p) {
    if (!raw[p]) continue;
    auto* cq = st->cqs[cq_i++].get();
    st->endpoints[p] = std::make_unique<GuardedEndpoint>(std::move(raw[p]), &st->lost[p], &st->fenced, epoch);
    st->links[p] = Link{st->endpoints[p].get(), prov_of[p], cq, cq};
  }
  {
    std::lock_guard lock(g_state_mu);
    state_ = std::move(st);
  }
  live_epoch_ = epoch;
  LATTICE_LOG_INFO("epoch {}: rank {} of {} over {}", epoch, rank, world, provider_ ? provider_->name() : std::string_view("the control plane only"));
  return Status::Ok();
}

Status Cluster::shrink(Deadline deadline) {
  if (!link_) return Status::Ok();
  LATTICE_RETURN_IF_ERROR(link_->send(json{{"t", "shrink"}, {"epoch", epoch_}}, deadline));
  for (;;) {
    LATTICE_ASSIGN_OR_RETURN(json plan, link_->wait_for({"plan"}, deadline));
    if (plan.value("epoch", uint64_t{0}) <= epoch_) continue;
    return build_epoch(plan, deadline).with_context("shrink");
  }
}

Result<std::unique_ptr<Cluster>> join_cluster(ClusterOptions options, Deadline deadline) {
  auto c = std::unique_ptr<Cluster>(new Cluster());
  c->opt_ = options;
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size)
    return InvalidArgument("rank " + std::to_string(options.rank) + " / world " + std::to_string(options.world_size));
  if (options.world_size == 1 && options.coordinator.empty()) {
    // A single rank: no control plane, no links, but the same object.
    nlohmann::json plan{{"epoch", 0}, {"rank", 0}, {"world", 1}, {"members", {host_name()}}};
    LATTICE_RETURN_IF_ERROR(c->build_epoch(plan, deadline));
    return c;
  }
  if (!options.secret) return InvalidArgument("joining a cluster needs its secret (LATTICE_SECRET_FILE or LATTICE_SECRET)");
  if (options.insecure)
    LATTICE_LOG_WARN("INSECURE mode (--insecure): peers are authenticated but control and TCP data traffic are NOT encrypted");
  if (options.rank == 0 && options.host_coordinator && !options.rejoin) {
    CoordinatorOptions co;
    LATTICE_ASSIGN_OR_RETURN(auto hp, split_host_port(options.coordinator));
    co.listen = (hp.first.find(':') != std::string::npos ? "[::]:" : "0.0.0.0:") + std::to_string(hp.second);
    co.world_size = options.world_size;
    co.secret = *options.secret;
    co.insecure = options.insecure;
    co.heartbeat_interval = options.membership.heartbeat_interval;
    co.failure_timeout = options.membership.failure_timeout;
    LATTICE_ASSIGN_OR_RETURN(c->coordinator_, Coordinator::start(co));
    if (hp.second == 0) {
      // Port 0: the kernel picked one as the coordinator bound; rank 0 dials that one and says
      // which on stderr, where whatever started the ranks reads it (tests do: no port is picked,
      // released and raced for).
      const std::string host = hp.first.find(':') != std::string::npos ? "[::1]" : "127.0.0.1";
      options.coordinator = host + ":" + std::to_string(c->coordinator_->port());
      c->opt_.coordinator = options.coordinator;
      std::fprintf(stderr, "lattice: coordinator listening on port %u\n", unsigned(c->coordinator_->port()));
      std::fflush(stderr);
    }
  }
  Cluster* raw = c.get();
  json hello{{"t", "hello"},
             {"rank", options.rank},
             {"world", options.world_size},
             {"rejoin", options.rejoin},
             {"name", options.name.empty() ? host_name() + ":" + std::to_string(::getpid()) : options.name}};
  LATTICE_ASSIGN_OR_RETURN(
      c->link_, MemberLink::connect(options.coordinator, *options.secret, options.insecure, options.membership, hello,
                                    [raw](const MembershipEvent& e) { raw->on_internal_event(e); }, options.on_event,
                                    deadline));
  LATTICE_ASSIGN_OR_RETURN(json m, c->link_->wait_for({"plan", "refused"}, deadline));
  if (m["t"] == "refused")
    return InvalidArgument("the coordinator refused rank " + std::to_string(options.rank) + ": " +
                           m.value("reason", std::string("?")));
  LATTICE_RETURN_IF_ERROR(c->build_epoch(m, deadline).with_context("join"));
  return c;
}

}  // namespace lattice::cluster
