// Factories of the built-in providers, one per folder; fabric.cc keeps the table that maps
// a URI scheme to one of them. `params` is the URI after "scheme://" (may be empty).
#pragma once

#include <memory>
#include <string_view>

#include "lattice/fabric/fabric.h"

namespace lattice::fabric::detail {

Result<std::unique_ptr<Provider>> make_shm_provider(std::string_view params, const ProviderOptions& options);
Result<std::unique_ptr<Provider>> make_tcp_provider(std::string_view params, const ProviderOptions& options);
// verbs/provider.cc: the system's verbs library ("verbs", "verbs://<device>") and the emulated
// device ("verbs-emu://apple-tb5", "verbs-emu://linux-rc?drop=17").
Result<std::unique_ptr<Provider>> make_verbs_provider(std::string_view params, const ProviderOptions& options);
Result<std::unique_ptr<Provider>> make_verbs_emu_provider(std::string_view params, const ProviderOptions& options);
// verbs/devices.cc: list_devices() of fabric.h.
DeviceList list_verbs_devices(bool include_emulated);

}  // namespace lattice::fabric::detail
