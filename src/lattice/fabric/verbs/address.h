// The verbs provider's addresses (address.cc): GID choice and the address blob (wire.h).
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <span>
#include <vector>

#include "lattice/core/status.h"
#include "lattice/fabric/verbs/api.h"
#include "lattice/fabric/verbs/wire.h"

namespace lattice::fabric::verbs {

// Which GID to use: index 1 when it is an IPv4-mapped entry (the paired interface has IPv4),
// else the first IPv4-mapped entry, else the first non-empty one. -1: none.
int choose_gid(const VerbsApi& api, ibv_context* ctx, uint8_t port, int table_len, ibv_gid* out);
std::vector<std::byte> encode_address(const AddressBlob& blob);
Result<AddressBlob> decode_address(std::span<const std::byte> bytes);

}  // namespace lattice::fabric::verbs
