// Internals shared by the communicator's files (comm.cc: staging and lanes; executor.cc and
// pipeline.cc: the plan executor; landing.cc and twoshot.cc: the one-sided landing zones): how
// work ids name a collective, a peer and a slot, and the per-provider and per-lane state.
#pragma once

#include <string>

#include <cstdint>

#include <memory>
#include <vector>

#include "lattice/coll/comm.h"
#include "lattice/fabric/fabric.h"

namespace lattice::coll::detail {

// WorkId: collective sequence (40 bits) | peer (12) | direction (1) | slot (11).
constexpr int kSlotBits = 11, kPeerBits = 12;
inline fabric::WorkId work_id(uint64_t seq, int peer, bool recv, int slot) {
  return (seq << (kSlotBits + 1 + kPeerBits)) | (uint64_t(peer) << (kSlotBits + 1)) | (uint64_t(recv) << kSlotBits) |
         uint64_t(slot);
}
struct Decoded {
  uint64_t seq;
  int peer;
  bool recv;
  int slot;
};
inline Decoded decode(fabric::WorkId id) {
  return {id >> (kSlotBits + 1 + kPeerBits), int((id >> (kSlotBits + 1)) & ((1u << kPeerBits) - 1)),
          bool((id >> kSlotBits) & 1), int(id & ((1u << kSlotBits) - 1))};
}
constexpr uint64_t kSeqMask = (uint64_t{1} << 40) - 1;

// The error a failed completion of this call becomes: a lost or cancelled link is peer-lost.
inline Status completion_error(const Status& s, int peer) {
  if (s.code() == ErrorCode::kPeerLost || s.code() == ErrorCode::kCancelled)
    return PeerLost("coll: rank " + std::to_string(peer) + " lost: " + s.message(), peer);
  return s.with_context("coll: rank " + std::to_string(peer));
}

// A message of the wrong size: the ranks made different calls.
inline Status size_mismatch(int peer, size_t got, size_t want) {
  return Corrupt("coll: rank " + std::to_string(peer) + " sent " + std::to_string(got) + " bytes where " +
                     std::to_string(want) + " were expected (mismatched calls?)",
                 peer);
}

}  // namespace lattice::coll::detail

namespace lattice::coll {

struct Communicator::Staging {
  fabric::Provider* provider = nullptr;
  std::unique_ptr<fabric::MemoryRegion> region;
  bool direct = false;  // its lanes are direct (PeerState::direct)
  // Direct transfers (CommOptions::zero_copy on a provider with release_buffer): the current
  // call's buffers (plan::Buf order) registered for local access, for this call only.
  std::unique_ptr<fabric::MemoryRegion> user[3];
};

struct Communicator::PeerState {
  fabric::Endpoint* ep = nullptr;
  fabric::CompletionQueue* cqs[2] = {nullptr, nullptr};  // the link's send and receive queues
  fabric::MemoryRegion* region = nullptr;
  Staging* staging = nullptr;
  // Sends go straight from the caller's buffers and plain (not reducing) receives straight
  // into them: the provider can release posted memory if the call fails (tcp).
  bool direct = false;
  size_t slot_bytes = 0;                // a slot; the largest message on this lane
  size_t send_base = 0, recv_base = 0;  // byte offsets of the peer's slots in `region` (direct: no send slots)
  // Per step:
  struct Msg {
    std::byte* ptr;
    size_t bytes;
    bool reduce;
    plan::Buf buf;
    size_t off;  // bytes into buf
  };
  // The slice of the caller's buffer a direct transfer uses.
  fabric::LocalSlice user_slice(plan::Buf buf, size_t off, size_t bytes) const {
    return {staging->user[size_t(buf)].get(), off, bytes};
  }
  std::vector<Msg> sends, recvs;
  size_t next_send = 0, next_recv = 0, done_send = 0, done_recv = 0;
  std::vector<int> free_send, free_recv;  // slot indices
  std::vector<size_t> recv_msg;           // slot -> index in recvs
};

// The names every part of the communicator (comm.cc, executor.cc, landing.cc) uses.
using fabric::Completion;
using fabric::LocalSlice;
using fabric::MemoryRegion;

using detail::decode;
using detail::Decoded;
using detail::kPeerBits;
using detail::kSeqMask;
using detail::work_id;

}  // namespace lattice::coll
