// The one-sided path of the staged endpoint (endpoint_impl.h): RC write, write-with-imm, read and
// atomics straight from registered memory, and why a device or a sealed link refuses them.
#include <cstring>

#include "lattice/fabric/verbs/endpoint_impl.h"
#include "lattice/fabric/verbs/memory.h"

namespace lattice::fabric::verbs::detail {

Status VerbsEndpoint::post_write_with_imm(LocalSlice src, RemoteSlice dst, uint32_t imm, WorkId id) {
  if (!dev_->rma) return no_rma("write");
  std::lock_guard lk(mu_);
  // The write, then a sequenced zero-byte message carrying the immediate on the same QP:
  // the target sees the data before the immediate (in-order delivery).
  if (Status st = post_rma_locked(Opcode::kWrite, src, dst, 0, 0, id, true); !st.ok()) return st;
  UserSend u{LocalSlice{}, id, 0, 0, false};
  u.op = Opcode::kWriteImm;
  u.imm = imm;
  u.bytes = src.length;
  sends_.push_back(u);
  posted_locked();
  return Status();
}

Status VerbsEndpoint::post_rma(Opcode op, LocalSlice local, RemoteSlice remote, uint64_t operand0, uint64_t operand1,
                               WorkId id, bool silent) {
  if (!dev_->rma) return no_rma(to_string(op).data());
  std::lock_guard lk(mu_);
  return post_rma_locked(op, local, remote, operand0, operand1, id, silent);
}

Status VerbsEndpoint::post_rma_locked(Opcode op, LocalSlice local, RemoteSlice remote, uint64_t operand0,
                                      uint64_t operand1, WorkId id, bool silent) {
  if (Status st = check_slice(local, "one-sided operation"); !st.ok()) return st;
  if (Status st = can_post(); !st.ok()) return st;
  bool atomic = op == Opcode::kFetchAdd || op == Opcode::kCompareSwap;
  if (atomic && local.length != 8) return InvalidArgument("verbs: atomics need an 8-byte result slice");
  if (!atomic && remote.length != local.length) return InvalidArgument("verbs: local and remote lengths differ");
  if (local.length > dev_->max_msg)
    return InvalidArgument("verbs: one-sided operation of " + std::to_string(local.length) + " bytes exceeds " +
                           std::to_string(dev_->max_msg));
  auto* region = dynamic_cast<HeapRegion*>(local.region);
  if (local.length > 0 && (region == nullptr || region->mr() == nullptr))
    return InvalidArgument("verbs: the local slice of a one-sided operation must be memory of this provider");
  uint32_t slot_index = kRmaSlots;
  for (uint32_t i = 0; i < kRmaSlots; ++i)
    if (!rma_[i].used) {
      slot_index = i;
      break;
    }
  if (slot_index == kRmaSlots) return ResourceExhausted("verbs: too many one-sided operations in flight");
  ibv_sge sge{reinterpret_cast<uintptr_t>(local.data()), static_cast<uint32_t>(local.length),
              region && region->mr() ? region->mr()->lkey : 0};
  ibv_send_wr wr{};
  wr.wr_id = wr_id(kKindRma, slot_index);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  auto rkey = static_cast<uint32_t>(remote.key & 0xffffffffu);
  switch (op) {
    case Opcode::kWrite:
      wr.opcode = IBV_WR_RDMA_WRITE;
      break;
    case Opcode::kRead:
      wr.opcode = IBV_WR_RDMA_READ;
      break;
    case Opcode::kFetchAdd:
      wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
      break;
    default:
      wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
      break;
  }
  if (atomic) {
    wr.wr.atomic.remote_addr = remote.offset;
    wr.wr.atomic.rkey = rkey;
    wr.wr.atomic.compare_add = operand0;
    wr.wr.atomic.swap = operand1;
  } else {
    wr.wr.rdma.remote_addr = remote.offset;
    wr.wr.rdma.rkey = rkey;
  }
  ibv_send_wr* bad = nullptr;
  if (int rc = api_.post_send(qp_, &wr, &bad))
    return ResourceExhausted("verbs: post of a one-sided operation failed: " + std::string(std::strerror(rc)));
  rma_[slot_index] = {true, silent, id, op, local.length};
  posted_locked();
  return Status();
}

Status VerbsEndpoint::no_rma(const char* op) const {
  {
    std::lock_guard lk(mu_);
    if (state_ == kFailed) return error_;
  }
  if (dev_->secret && dev_->qp_type == IBV_QPT_RC)
    return Unavailable(std::string("verbs: one-sided ") + op + " is refused on a sealed link: the NIC places an RC " +
                       "write or read in memory without the target's CPU, so nothing there could authenticate or " +
                       "decrypt it. Use two-sided sends (caps.rma_write/rma_read/atomics are false when sealed, and " +
                       "the collectives take their two-sided algorithms), or run plaintext (--insecure) on a " +
                       "trusted link");
  return Unavailable(std::string("verbs: ") + op + " is not available on " + dev_->name +
                     " (two-sided staged path; caps.rma_write/rma_read/atomics are false)");
}

}  // namespace lattice::fabric::verbs::detail
