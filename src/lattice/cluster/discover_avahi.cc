// The Responder over Avahi's embeddable core (libavahi-core): the mDNS stack runs inside this
// process on its own thread (AvahiThreadedPoll), with no daemon and no D-Bus, so one
// responder per network namespace works. Avahi calls back on that thread with its lock held;
// our threads take the lock before touching Avahi objects, and meet the callbacks through
// mu_/cv_ (never holding mu_ while taking Avahi's lock).
#include "lattice/cluster/discover.h"

#ifdef LATTICE_WITH_AVAHI

#include <avahi-common/address.h>
#include <avahi-common/alternative.h>
#include <avahi-common/error.h>
#include <avahi-common/malloc.h>
#include <avahi-common/strlst.h>
#include <avahi-common/thread-watch.h>
#include <avahi-core/core.h>
#include <avahi-core/log.h>
#include <avahi-core/lookup.h>
#include <avahi-core/publish.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "lattice/core/log.h"

namespace lattice::cluster {
namespace {

void avahi_log(AvahiLogLevel level, const char* txt) {
  if (level <= AVAHI_LOG_WARN) {
    LATTICE_LOG_INFO("avahi: {}", txt);
  } else {
    LATTICE_LOG_DEBUG("avahi: {}", txt);
  }
}

// A DNS label from a node name: Avahi host names take no dots.
std::string host_label(const std::string& name) {
  std::string h = name;
  for (char& c : h)
    if (c == '.' || c == '_') c = '-';
  return h.empty() ? "lattice-node" : h;
}

class AvahiResponder final : public Responder {
 public:
  ~AvahiResponder() override {
    if (poll_) avahi_threaded_poll_stop(poll_);
    // Stopped: no callback runs any more; free in dependency order.
    for (auto* r : resolvers_) avahi_s_service_resolver_free(r);
    if (browser_) avahi_s_service_browser_free(browser_);
    if (group_) avahi_s_entry_group_free(group_);
    if (server_) avahi_server_free(server_);
    if (poll_) avahi_threaded_poll_free(poll_);
  }

  Status announce(const Announcement& a, Deadline deadline) override {
    if (server_) return InvalidArgument("this responder already runs; announce once, before browsing");
    LATTICE_RETURN_IF_ERROR(start_server(host_label(a.name), /*publish=*/true));
    {
      std::unique_lock lk(mu_);
      if (!cv_.wait_until(lk, deadline.when(), [&] { return server_state_ == AVAHI_SERVER_RUNNING || !error_.empty(); }))
        return Timeout("mDNS responder not running after the deadline (host name probing)");
      if (!error_.empty()) return Unavailable("mDNS responder: " + error_);
    }
    AvahiStringList* txt = nullptr;
    for (const auto& e : encode_txt(a)) {
      if (e.size() > 255) return InvalidArgument("TXT entry longer than 255 bytes: " + e.substr(0, 40) + "...");
      txt = avahi_string_list_add(txt, e.c_str());
    }
    txt = avahi_string_list_reverse(txt);  // add() prepends
    avahi_threaded_poll_lock(poll_);
    group_ = avahi_s_entry_group_new(server_, &AvahiResponder::on_group, this);
    int rc = group_ ? avahi_server_add_service_strlst(server_, group_, AVAHI_IF_UNSPEC, AVAHI_PROTO_INET,
                                                      static_cast<AvahiPublishFlags>(0), a.name.c_str(), kServiceType,
                                                      nullptr, nullptr, a.probe_port, txt)
                    : avahi_server_errno(server_);
    if (rc == 0) rc = avahi_s_entry_group_commit(group_);
    avahi_threaded_poll_unlock(poll_);
    avahi_string_list_free(txt);
    if (rc != 0) return Unavailable(std::string("publishing the service: ") + avahi_strerror(rc));
    std::unique_lock lk(mu_);
    if (!cv_.wait_until(lk, deadline.when(), [&] { return group_state_ != AVAHI_ENTRY_GROUP_REGISTERING &&
                                                          group_state_ != AVAHI_ENTRY_GROUP_UNCOMMITED; }))
      return Timeout("the service was not registered before the deadline");
    if (group_state_ == AVAHI_ENTRY_GROUP_COLLISION)
      return InvalidArgument("another node on the network already announces the name '" + a.name +
                             "' (give this one another with --name)");
    if (group_state_ != AVAHI_ENTRY_GROUP_ESTABLISHED) return Unavailable("mDNS: registering the service failed");
    return Status::Ok();
  }

  Result<std::vector<DiscoveredNode>> browse(const BrowseOptions& o) override {
    Deadline deadline = Deadline::after(o.timeout);
    if (!server_) LATTICE_RETURN_IF_ERROR(start_server("", /*publish=*/false));
    {
      // A query sent before the responder has its interfaces up goes nowhere: wait for it to
      // run (quick without publishing), but browse anyway at a quarter of the budget.
      std::unique_lock lk(mu_);
      cv_.wait_until(lk, Deadline::after(o.timeout / 4).when(),
                     [&] { return server_state_ == AVAHI_SERVER_RUNNING || !error_.empty(); });
      found_.clear();
      pending_ = 0;
    }
    avahi_threaded_poll_lock(poll_);
    browser_ = avahi_s_service_browser_new(server_, AVAHI_IF_UNSPEC, AVAHI_PROTO_INET, kServiceType, nullptr,
                                           static_cast<AvahiLookupFlags>(0), &AvahiResponder::on_browse, this);
    int err = browser_ ? 0 : avahi_server_errno(server_);
    avahi_threaded_poll_unlock(poll_);
    if (err != 0) return Unavailable(std::string("mDNS browse: ") + avahi_strerror(err));
    {
      std::unique_lock lk(mu_);
      cv_.wait_until(lk, deadline.when(), [&] {
        if (!error_.empty()) return true;
        // Not Avahi's "all for now": it comes after the first query's answers, and answers
        // lost or late there (seen between namespaces) would go missing; the timeout decides.
        return o.expect > 0 && resolved_count() >= static_cast<size_t>(o.expect);
      });
    }
    avahi_threaded_poll_lock(poll_);
    for (auto* r : resolvers_) avahi_s_service_resolver_free(r);
    resolvers_.clear();
    avahi_s_service_browser_free(browser_);
    browser_ = nullptr;
    avahi_threaded_poll_unlock(poll_);

    std::lock_guard lk(mu_);
    if (!error_.empty()) return Unavailable("mDNS browse: " + error_);
    std::string version = o.version.empty() ? std::string(lattice_version()) : o.version;
    std::vector<DiscoveredNode> out;
    for (auto& [name, f] : found_) {
      if (!f.resolved) continue;
      DiscoveredNode n;
      n.seen_at.assign(f.addresses.begin(), f.addresses.end());
      auto ann = decode_txt(f.txt);
      if (!ann.ok()) {
        n.announcement.name = name;
        n.status = NodeStatus::kMalformed;
        n.why = ann.status().message();
      } else {
        n.announcement = std::move(*ann);
        n.announcement.name = name;  // the instance name is what the network agreed on
        n.announcement.probe_port = f.port;
        n.status = classify_node(n.announcement, o.fingerprint, version, &n.why);
      }
      out.push_back(std::move(n));
    }
    return out;  // found_ is a std::map: sorted by name
  }

 private:
  struct Found {
    bool resolved = false;
    std::vector<std::string> txt;
    std::set<std::string> addresses;
    uint16_t port = 0;
  };

  Status start_server(const std::string& host, bool publish) {
    static std::once_flag log_once;
    std::call_once(log_once, [] { avahi_set_log_function(avahi_log); });
    poll_ = avahi_threaded_poll_new();
    if (!poll_) return ResourceExhausted("avahi_threaded_poll_new failed");
    AvahiServerConfig config;
    avahi_server_config_init(&config);
    config.use_ipv6 = 0;
    config.publish_hinfo = 0;
    config.publish_workstation = 0;
    config.publish_domain = 0;
    config.disallow_other_stacks = 0;  // share 5353 with a system daemon if there is one
    config.disable_publishing = publish ? 0 : 1;
    if (!host.empty()) config.host_name = avahi_strdup(host.c_str());
    int err = 0;
    server_ = avahi_server_new(avahi_threaded_poll_get(poll_), &config, &AvahiResponder::on_server, this, &err);
    avahi_server_config_free(&config);
    if (!server_) return Unavailable(std::string("cannot start the mDNS responder: ") + avahi_strerror(err));
    if (avahi_threaded_poll_start(poll_) < 0) return ResourceExhausted("cannot start the mDNS thread");
    return Status::Ok();
  }

  size_t resolved_count() const {
    return static_cast<size_t>(std::count_if(found_.begin(), found_.end(), [](const auto& kv) { return kv.second.resolved; }));
  }

  static void on_server(AvahiServer* s, AvahiServerState state, void* self_) {
    auto* self = static_cast<AvahiResponder*>(self_);
    if (state == AVAHI_SERVER_COLLISION) {
      // Our host name is taken (by another machine, or a namespace sharing this hostname):
      // take the next free one; the node name (the service's instance name) stays.
      char* alt = avahi_alternative_host_name(avahi_server_get_host_name(s));
      LATTICE_LOG_INFO("mDNS host name {} is taken; now {}", avahi_server_get_host_name(s), alt);
      avahi_server_set_host_name(s, alt);
      avahi_free(alt);
      return;
    }
    std::lock_guard lk(self->mu_);
    self->server_state_ = state;
    if (state == AVAHI_SERVER_FAILURE) self->error_ = avahi_strerror(avahi_server_errno(s));
    self->cv_.notify_all();
  }

  static void on_group(AvahiServer*, AvahiSEntryGroup*, AvahiEntryGroupState state, void* self_) {
    auto* self = static_cast<AvahiResponder*>(self_);
    std::lock_guard lk(self->mu_);
    self->group_state_ = state;
    self->cv_.notify_all();
  }

  static void on_browse(AvahiSServiceBrowser*, AvahiIfIndex iface, AvahiProtocol proto, AvahiBrowserEvent event,
                        const char* name, const char* type, const char* domain, AvahiLookupResultFlags, void* self_) {
    auto* self = static_cast<AvahiResponder*>(self_);
    switch (event) {
      case AVAHI_BROWSER_NEW: {
        // Called with Avahi's lock held, so the resolver can be created here.
        auto* r = avahi_s_service_resolver_new(self->server_, iface, proto, name, type, domain, AVAHI_PROTO_INET,
                                               static_cast<AvahiLookupFlags>(0), &AvahiResponder::on_resolve, self);
        std::lock_guard lk(self->mu_);
        self->found_[name];
        if (r) {
          self->resolvers_.push_back(r);
          ++self->pending_;
        }
        break;
      }
      case AVAHI_BROWSER_REMOVE: {
        std::lock_guard lk(self->mu_);
        self->found_.erase(name);
        break;
      }
      case AVAHI_BROWSER_FAILURE: {
        std::lock_guard lk(self->mu_);
        self->error_ = avahi_strerror(avahi_server_errno(self->server_));
        self->cv_.notify_all();
        break;
      }
      default: break;
    }
  }

  static void on_resolve(AvahiSServiceResolver* r, AvahiIfIndex, AvahiProtocol, AvahiResolverEvent event,
                         const char* name, const char*, const char*, const char*, const AvahiAddress* a, uint16_t port,
                         AvahiStringList* txt, AvahiLookupResultFlags, void* self_) {
    auto* self = static_cast<AvahiResponder*>(self_);
    std::lock_guard lk(self->mu_);
    auto it = std::find(self->resolvers_.begin(), self->resolvers_.end(), r);
    if (it == self->resolvers_.end()) return;  // already done (a later update of the same record)
    if (event == AVAHI_RESOLVER_FOUND) {
      Found& f = self->found_[name];
      f.resolved = true;
      f.port = port;
      f.txt.clear();
      for (AvahiStringList* p = txt; p; p = avahi_string_list_get_next(p))
        f.txt.emplace_back(reinterpret_cast<const char*>(avahi_string_list_get_text(p)), avahi_string_list_get_size(p));
      char buf[AVAHI_ADDRESS_STR_MAX];
      if (a && avahi_address_snprint(buf, sizeof buf, a)) f.addresses.insert(buf);
    }
    // One answer per resolver is enough (found, or timed out: the node left or never answered).
    self->resolvers_.erase(it);
    avahi_s_service_resolver_free(r);
    --self->pending_;
    self->cv_.notify_all();
  }

  AvahiThreadedPoll* poll_ = nullptr;
  AvahiServer* server_ = nullptr;
  AvahiSEntryGroup* group_ = nullptr;
  AvahiSServiceBrowser* browser_ = nullptr;
  std::vector<AvahiSServiceResolver*> resolvers_;  // guarded by Avahi's lock and mu_

  std::mutex mu_;
  std::condition_variable cv_;
  AvahiServerState server_state_ = AVAHI_SERVER_INVALID;
  AvahiEntryGroupState group_state_ = AVAHI_ENTRY_GROUP_UNCOMMITED;
  std::string error_;
  std::map<std::string, Found> found_;
  int pending_ = 0;
};

}  // namespace

Result<std::unique_ptr<Responder>> make_responder() { return std::unique_ptr<Responder>(new AvahiResponder()); }

}  // namespace lattice::cluster

#else  // !LATTICE_WITH_AVAHI

namespace lattice::cluster {
Result<std::unique_ptr<Responder>> make_responder() {
#ifdef __APPLE__
  return Unavailable("discovery on macOS needs the Bonjour (dns_sd.h) responder, which is not written yet");
#else
  return Unavailable("built without Avahi's core (install libavahi-core-dev and rebuild)");
#endif
}
}  // namespace lattice::cluster

#endif
