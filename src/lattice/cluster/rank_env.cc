#include "lattice/cluster/rank_env.h"

#include <cstdlib>
#include <string_view>

#include "lattice/crypto/secret.h"

namespace lattice::cluster {

static_assert(std::string_view(env::kSecret) == crypto::kSecretEnv);
static_assert(std::string_view(env::kSecretFile) == crypto::kSecretFileEnv);

namespace {

const char* get(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

bool get_flag(const char* name) {
  const char* v = get(name);
  return v && std::string_view(v) != "0";
}

}  // namespace

Result<std::optional<int>> env_int(const char* name) {
  const char* v = get(name);
  if (!v) return std::optional<int>{};
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1'000'000)
    return InvalidArgument(std::string(name) + "='" + v + "' is not a non-negative integer");
  return std::optional<int>(static_cast<int>(x));
}

std::vector<std::pair<std::string, std::string>> RankEnv::to_env() const {
  std::vector<std::pair<std::string, std::string>> out;
  auto put = [&](const char* k, const std::string& v) {
    if (!v.empty()) out.emplace_back(k, v);
  };
  out.emplace_back(env::kRank, std::to_string(rank));
  out.emplace_back(env::kWorldSize, std::to_string(world_size));
  put(env::kCoordinator, coordinator);
  if (external_coordinator) out.emplace_back(env::kExternalCoordinator, "1");
  put(env::kTopology, topology);
  put(env::kProvider, provider);
  put(env::kFabricAddr, fabric_addr);
  put(env::kSecret, secret_hex);
  put(env::kSecretFile, secret_file);
  if (insecure) out.emplace_back(env::kInsecure, "1");
  if (rejoin) out.emplace_back(env::kRejoin, "1");
  if (heartbeat_ms) out.emplace_back(env::kHeartbeatMs, std::to_string(*heartbeat_ms));
  if (failure_timeout_ms) out.emplace_back(env::kFailureTimeoutMs, std::to_string(*failure_timeout_ms));
  if (connect_timeout_ms) out.emplace_back(env::kConnectTimeoutMs, std::to_string(*connect_timeout_ms));
  if (local_cpus) out.emplace_back(env::kLocalCpus, std::to_string(*local_cpus));
  return out;
}

Result<RankEnv> RankEnv::from_env() {
  RankEnv e;
  struct Pair {
    const char* rank;
    const char* size;
  };
  const Pair sources[] = {{env::kRank, env::kWorldSize},
                          {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                          {"PMI_RANK", "PMI_SIZE"},
                          {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (const auto& p : sources) {
    if (!get(p.rank) || !get(p.size)) continue;
    LATTICE_ASSIGN_OR_RETURN(auto r, env_int(p.rank));
    LATTICE_ASSIGN_OR_RETURN(auto w, env_int(p.size));
    e.rank = *r;
    e.world_size = *w;
    e.launched = true;
    break;
  }
  if (e.world_size < 1 || e.rank >= e.world_size)
    return InvalidArgument("rank " + std::to_string(e.rank) + " is not below the world size " +
                           std::to_string(e.world_size));
  if (const char* v = get(env::kCoordinator)) e.coordinator = v;
  e.external_coordinator = get_flag(env::kExternalCoordinator);
  if (const char* v = get(env::kTopology)) e.topology = v;
  if (const char* v = get(env::kProvider)) e.provider = v;
  if (const char* v = get(env::kFabricAddr)) e.fabric_addr = v;
  if (const char* v = get(env::kSecret)) e.secret_hex = v;
  if (const char* v = get(env::kSecretFile)) e.secret_file = v;
  e.insecure = get_flag(env::kInsecure);
  e.rejoin = get_flag(env::kRejoin);
  LATTICE_ASSIGN_OR_RETURN(e.heartbeat_ms, env_int(env::kHeartbeatMs));
  LATTICE_ASSIGN_OR_RETURN(e.failure_timeout_ms, env_int(env::kFailureTimeoutMs));
  LATTICE_ASSIGN_OR_RETURN(e.connect_timeout_ms, env_int(env::kConnectTimeoutMs));
  LATTICE_ASSIGN_OR_RETURN(e.local_cpus, env_int(env::kLocalCpus));
  return e;
}

}  // namespace lattice::cluster
