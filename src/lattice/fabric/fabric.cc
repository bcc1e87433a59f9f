#include "lattice/fabric/fabric.h"

#include <array>

#include "lattice/fabric/providers.h"

namespace lattice::fabric {

std::string_view to_string(Opcode op) {
  switch (op) {
    case Opcode::kSend: return "send";
    case Opcode::kRecv: return "recv";
    case Opcode::kWrite: return "write";
    case Opcode::kWriteImm: return "write-imm";
    case Opcode::kRecvImm: return "recv-imm";
    case Opcode::kRead: return "read";
    case Opcode::kFetchAdd: return "fetch-add";
    case Opcode::kCompareSwap: return "compare-swap";
  }
  return "unknown";
}

namespace {

using Factory = Result<std::unique_ptr<Provider>> (*)(std::string_view, const ProviderOptions&);
struct Entry {
  std::string_view scheme;
  Factory factory;
  std::string_view probe_uri;  // what available_providers() tries
};
// The one table of providers. A provider missing here is "unavailable", never a crash.
constexpr std::array kProviders{
    Entry{"shm", detail::make_shm_provider, "shm"},
    Entry{"tcp", detail::make_tcp_provider, "tcp://127.0.0.1:0"},
    Entry{"verbs", detail::make_verbs_provider, "verbs"},
    Entry{"verbs-emu", detail::make_verbs_emu_provider, "verbs-emu://apple-tb5"},
};

}  // namespace

Result<std::unique_ptr<Provider>> make_provider(std::string_view uri, const ProviderOptions& options) {
  std::string_view scheme = uri;
  std::string_view params;
  if (auto pos = uri.find("://"); pos != std::string_view::npos) {
    scheme = uri.substr(0, pos);
    params = uri.substr(pos + 3);
  }
  for (const auto& e : kProviders) {
    if (e.scheme == scheme) return e.factory(params, options);
  }
  return Unavailable("unknown fabric provider '" + std::string(scheme) + "' in URI '" + std::string(uri) +
                     "' (known: shm, tcp, verbs, verbs-emu)");
}

std::vector<std::string> available_providers() {
  std::vector<std::string> out;
  for (const auto& e : kProviders) {
    if (e.factory(e.probe_uri.substr(e.probe_uri.find("://") == std::string_view::npos
                                          ? e.probe_uri.size()
                                          : e.probe_uri.find("://") + 3),
                  {})
            .ok())
      out.emplace_back(e.scheme);
  }
  return out;
}

DeviceList list_devices(bool include_emulated) { return detail::list_verbs_devices(include_emulated); }

}  // namespace lattice::fabric
