// The control protocol's schema (the messages are listed in bootstrap.h): for every message
// type, the fields it carries, their JSON types and their ranges. Both ends check every message
// against it before reading a field, so a malformed or version-skewed message is refused with
// a clear reason instead of throwing nlohmann's type_error out of a reader.
//
// Rules: "t" is a string; an unknown type passes (it is ignored by the reader, so a newer peer
// may add types); a known type must carry its required fields with the right type and in range;
// fields the schema does not name are ignored; strings and arrays are bounded.
#pragma once

#include <nlohmann/json.hpp>

#include "lattice/core/status.h"

namespace lattice::cluster {

inline constexpr int kMaxControlWorld = 1024;        // ranks in one cluster
inline constexpr size_t kMaxControlName = 512;       // bytes of the name a member gives in hello
inline constexpr size_t kMaxControlReason = 8192;    // bytes of a reason (refused, view, ag_fail)

// Ok, or kCorrupt naming the message type and the field that is wrong.
Status validate_from_member(const nlohmann::json& msg);       // what the coordinator reads
Status validate_from_coordinator(const nlohmann::json& msg);  // what a member reads

}  // namespace lattice::cluster
