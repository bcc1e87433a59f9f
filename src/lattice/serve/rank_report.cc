#include "lattice/serve/rank_report.h"

#include <algorithm>

namespace lattice::serve {

using nlohmann::json;

void fill_shard(const engine::Model& m, RankReport* r) {
  r->layer_begin = static_cast<int>(m.layer_begin()), r->layer_end = static_cast<int>(m.layer_end());
  r->kv_head_begin = static_cast<int>(m.kv_heads().begin), r->kv_head_end = static_cast<int>(m.kv_heads().end);
  r->head_begin = static_cast<int>(m.heads().begin), r->head_end = static_cast<int>(m.heads().end);
  r->ff_begin = static_cast<int>(m.ff().begin), r->ff_end = static_cast<int>(m.ff().end);
  r->shard_bytes = m.shard_bytes();
  const engine::Hparams& hp = m.hparams();
  r->n_expert = hp.n_expert;
  r->expert_parallel = m.expert_parallel();
  r->experts_owned = 0;
  if (!hp.moe()) return;
  // The first mixture-of-experts layer of the shard (the leading dense blocks have none).
  for (uint32_t l = m.layer_begin(); l < m.layer_end(); ++l) {
    if (!hp.moe_layer(l)) continue;
    for (uint32_t e = 0; e < hp.n_expert; ++e) r->experts_owned += !r->expert_parallel || m.expert_owner(l, e) == m.rank();
    return;
  }
}

HostStats HostReadings::get() {
  std::lock_guard lk(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (!have_ || now - at_ >= every_) {
    last_ = sampler_.sample(now);
    at_ = now, have_ = true;
  }
  return last_;
}

namespace {

template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}
template <class T>
void get_opt(const json& j, const char* key, std::optional<T>* out) {
  if (j.contains(key) && j[key].is_number()) *out = j[key].get<T>();
}
json host_json(const HostStats& h) {
  return {{"mem_total", opt(h.mem_total)}, {"mem_available", opt(h.mem_available)}, {"load1", opt(h.load1)},
          {"cpu_busy", opt(h.cpu_busy)},   {"cpus", h.cpus},                       {"temp_c", opt(h.temp_c)},
          {"temp_sensor", h.temp_sensor},  {"power_w", opt(h.power_w)},            {"power_source", h.power_source}};
}
HostStats host_from(const json& j) {
  HostStats h;
  if (!j.is_object()) return h;
  get_opt(j, "mem_total", &h.mem_total);
  get_opt(j, "mem_available", &h.mem_available);
  get_opt(j, "load1", &h.load1);
  get_opt(j, "cpu_busy", &h.cpu_busy);
  get_opt(j, "temp_c", &h.temp_c);
  get_opt(j, "power_w", &h.power_w);
  if (j.value("cpus", json()).is_number_unsigned()) h.cpus = j["cpus"].get<unsigned>();
  if (j.value("temp_sensor", json()).is_string()) h.temp_sensor = j["temp_sensor"].get<std::string>();
  if (j.value("power_source", json()).is_string()) h.power_source = j["power_source"].get<std::string>();
  return h;
}

}  // namespace

std::string encode_report(const RankReport& r) {
  json links = json::array();
  for (const RankReport::Link& l : r.links) links.push_back({l.peer, l.sent, l.received, l.lat_us, l.gbps, l.figures_from});
  return json{{"first_rank", r.first_rank},
              {"resident", r.resident_bytes},
              {"coll", {r.coll_bytes, r.coll_calls}},
              {"shard", {r.layer_begin, r.layer_end, r.kv_head_begin, r.kv_head_end, r.head_begin, r.head_end,
                         r.ff_begin, r.ff_end, r.n_expert, r.experts_owned, r.expert_parallel ? 1 : 0}},
              {"shard_bytes", r.shard_bytes},
              {"links", links},
              {"host", host_json(r.host)}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

RankReport decode_report(const std::string& text, int rank) {
  RankReport r;
  r.rank = rank;
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return r;
  auto num = [](const json& v) { return v.is_number_integer() || v.is_number_unsigned(); };
  try {
    if (num(j.value("first_rank", json()))) r.first_rank = j["first_rank"].get<int>();
    if (num(j.value("resident", json()))) r.resident_bytes = j["resident"].get<uint64_t>();
    if (num(j.value("shard_bytes", json()))) r.shard_bytes = j["shard_bytes"].get<uint64_t>();
    const json c = j.value("coll", json());
    if (c.is_array() && c.size() == 2 && num(c[0]) && num(c[1])) r.coll_bytes = c[0].get<uint64_t>(), r.coll_calls = c[1].get<uint64_t>();
    const json s = j.value("shard", json());
    if (s.is_array() && s.size() == 11 && std::all_of(s.begin(), s.end(), num)) {
      r.layer_begin = s[0].get<int>(), r.layer_end = s[1].get<int>(), r.kv_head_begin = s[2].get<int>();
      r.kv_head_end = s[3].get<int>(), r.head_begin = s[4].get<int>(), r.head_end = s[5].get<int>();
      r.ff_begin = s[6].get<int>(), r.ff_end = s[7].get<int>(), r.n_expert = s[8].get<uint32_t>();
      r.experts_owned = s[9].get<uint32_t>(), r.expert_parallel = s[10].get<int>() != 0;
    }
    const json links = j.value("links", json());
    if (links.is_array())
      for (const json& l : links)
        if (l.is_array() && l.size() == 6 && num(l[0]) && l[1].is_number_unsigned() && l[2].is_number_unsigned() &&
            l[3].is_number() && l[4].is_number() && l[5].is_string())
          r.links.push_back({l[0].get<int>(), l[1].get<uint64_t>(), l[2].get<uint64_t>(), 0, 0, l[3].get<double>(),
                             l[4].get<double>(), l[5] == "ping" || l[5] == "topology" ? l[5].get<std::string>() : ""});
    r.host = host_from(j.value("host", json()));
  } catch (const json::exception&) {
    // Out of range for its type: what was read stays, the rest is unknown.
  }
  return r;
}

json rank_status_json(const RankReport& r) {
  json links = json::array();
  for (const RankReport::Link& l : r.links)
    links.push_back({{"peer", l.peer},
                     {"sent", l.sent},
                     {"received", l.received},
                     {"sent_per_s", l.sent_per_s},
                     {"received_per_s", l.received_per_s},
                     {"lat_us", l.lat_us > 0 ? json(l.lat_us) : json(nullptr)},
                     {"gbps", l.gbps > 0 ? json(l.gbps) : json(nullptr)},
                     {"figures_from", l.figures_from}});
  const HostStats& h = r.host;
  const json mem_used = h.mem_total && h.mem_available && *h.mem_available <= *h.mem_total
                            ? json(*h.mem_total - *h.mem_available) : json(nullptr);
  return {{"rank", r.rank},
          {"first_rank", r.first_rank},
          {"layers", {r.layer_begin, r.layer_end}},
          {"kv_heads", {r.kv_head_begin, r.kv_head_end}},
          {"heads", {r.head_begin, r.head_end}},
          {"experts", {{"n_expert", r.n_expert}, {"owned", r.experts_owned}, {"expert_parallel", r.expert_parallel},
                       {"ff", {r.ff_begin, r.ff_end}}}},
          {"shard_bytes", r.shard_bytes},
          {"resident_bytes", r.resident_bytes},
          {"coll_bytes", r.coll_bytes},
          {"coll_bytes_per_s", r.coll_bytes_per_s},
          {"mem_used", mem_used},
          {"mem_free", opt(h.mem_available)},
          {"mem_total", opt(h.mem_total)},
          {"load1", opt(h.load1)},
          {"cpu_busy", opt(h.cpu_busy)},
          {"cpus", h.cpus},
          {"temp_c", opt(h.temp_c)},
          {"temp_sensor", h.temp_sensor},
          {"power_w", opt(h.power_w)},
          {"power_source", h.power_source},
          {"links", std::move(links)}};
}

}  // namespace lattice::serve
