// The verbs provider's staged endpoint, its class (private to the provider): one QP, staging
// slots, a progress thread. Its code is in four files along the protocol's seams:
//   endpoint.cc   lifecycle, connect and the hellos, posting, progress and completions
//   chunk_tx.cc   the go-back-N sender: slots posted with ack fields and checksum (sealed
//                 when the session is), control chunks, acks taken, retransmission
//   chunk_rx.cc   the receive parser (ChunkReceiver, no QP: fuzz/verbs_chunk_fuzz.cc drives it)
//   rma.cc        the one-sided path (RC write, read, atomics; refused when sealed)
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "lattice/fabric/verbs/chunk_rx.h"
#include "lattice/fabric/verbs/endpoint.h"
#include "lattice/fabric/verbs/seal.h"
#include "lattice/fabric/verbs/wire.h"

namespace lattice::fabric::verbs::detail {

constexpr uint64_t kKindData = 1, kKindCtrl = 2, kKindRecv = 3, kKindRma = 4;
constexpr uint32_t kRmaSlots = 128;  // one-sided operations in flight (RC mode)
constexpr uint64_t wr_id(uint64_t kind, uint32_t index) { return (kind << 32) | index; }
constexpr uint32_t kSlotsTotal = kDataSlots + kCtrlSlots + kRecvSlots;
constexpr size_t kMaxPosted = 4096;  // fabric-level queue depth per direction
constexpr uint8_t kFlagDone = 16;    // kHello: the sender is connected (never answer it)
// Retransmission timeout: only a lost tail needs it (a gap is nacked at once). Generous, since
// on a loaded host the peer may not run for milliseconds; doubled per silent round.
constexpr auto kRto = std::chrono::milliseconds(40);
// A poller of the endpoint's queue that progressed it this recently drives its data path
// (VerbsEndpoint::last_poll_).
constexpr auto kPollerWindow = std::chrono::microseconds(500);
constexpr auto kRtoMax = std::chrono::milliseconds(320);
// How long the ack of a message's end waits for a slot going back to carry it (ChunkReceiver::
// tail_due): past the gap between a decode step's collectives, far inside the RTO.
constexpr auto kTailAckDelay = std::chrono::milliseconds(1);
constexpr auto kHelloPeriod = std::chrono::milliseconds(5);

using Clock = std::chrono::steady_clock;

class VerbsEndpoint final : public Endpoint, public Progressable {
 public:
  VerbsEndpoint(std::shared_ptr<Device> dev, VerbsCompletionQueue* scq, VerbsCompletionQueue* rcq,
                const EndpointOptions& options);
  Status init();
  ~VerbsEndpoint() override;
  std::vector<std::byte> local_address() const override;
  Status connect(std::span<const std::byte> peer_address, Deadline deadline) override;
  Status post_send(LocalSlice src, WorkId id) override;
  Status post_recv(LocalSlice dst, WorkId id) override;
  Status post_write(LocalSlice src, RemoteSlice dst, WorkId id) override;
  Status post_write_with_imm(LocalSlice src, RemoteSlice dst, uint32_t imm, WorkId id) override;
  Status post_read(LocalSlice dst, RemoteSlice src, WorkId id) override;
  Status post_fetch_add(LocalSlice result, RemoteSlice target, uint64_t add, WorkId id) override;
  Status post_compare_swap(LocalSlice result, RemoteSlice target, uint64_t expected, uint64_t desired,
                           WorkId id) override;
  Status release_buffer(WorkId) override;
  Result<std::unique_ptr<RemoteMapping>> map_remote(RemoteSlice, uint32_t) override;
  Status status() const override;
  int peer_rank() const override { return opts_.peer_rank; }
  LinkBytes link_bytes() const override { return link_.get(); }

  void try_progress() override;
  void poller_leaving() override;
  EndpointStats stats() const;

 private:
  enum State { kIdle, kConnecting, kConnected, kFailed };
  struct UserSend {
    LocalSlice src;
    WorkId id;
    uint64_t next_offset;
    uint64_t last_seq;
    bool all_chunked;
    Opcode op = Opcode::kSend;  // kWriteImm: the immediate's message after the write
    uint32_t imm = 0;
    size_t bytes = 0;  // kWriteImm: bytes written
    // A send's completion went out when its last chunk was staged (pump_sends); a write-with-imm's
    // waits for the ack.
    bool completed() const { return op == Opcode::kSend && all_chunked; }
  };
  struct RmaSlot {
    bool used = false;
    bool silent = false;  // the write half of a write-with-imm: its completion comes with the imm's ack
    WorkId id = 0;
    Opcode op = Opcode::kWrite;
    size_t bytes = 0;
  };
  struct UserRecv {
    LocalSlice dst;
    WorkId id;
  };
  struct DataSlot {
    uint64_t seq = 0;
    bool used = false;       // holds an unacked chunk
    bool in_flight = false;  // posted, its completion not yet polled
    bool repost = false;     // retransmit once the completion is back
  };
  static Status check_slice(const LocalSlice& s, const char* what);
  Status can_post() const;
  Status post_rma(Opcode op, LocalSlice local, RemoteSlice remote, uint64_t operand0, uint64_t operand1, WorkId id,
                  bool silent);

  // Zero-copy: the local slice must be a region registered with this device; the remote one is
  // addressed by its rkey and an offset (zero-based regions); the target checks both.
  Status post_rma_locked(Opcode op, LocalSlice local, RemoteSlice remote, uint64_t operand0, uint64_t operand1,
                         WorkId id, bool silent);
  Status no_rma(const char* op) const;
  std::byte* slot(uint32_t global_index) const { return staging_ + size_t{global_index} * kSlotBytes; }
  std::byte* data_slot(uint32_t i) const { return slot(i); }
  std::byte* ctrl_slot(uint32_t i) const { return slot(kDataSlots + i); }
  std::byte* recv_slot(uint32_t i) const { return slot(kDataSlots + kCtrlSlots + i); }

  uint64_t credit_limit() const { return rx_.credit_limit(); }

  // Fills in the ack fields and the checksum, then posts the whole slot (whole frames).
  bool post_slot(std::byte* p, uint64_t id, Clock::time_point now);
  bool post_recv_slot(uint32_t i);

  // A control chunk; sealed once the session has keys, except a handshake hello (its payload:
  // `body`, the handshake message).
  bool send_ctrl(ChunkType type, uint8_t flags, Clock::time_point now, std::span<const uint8_t> body = {});
  void flush_locked(const Status& st);
  void fail_locked(Status st);
  void run();

  // One round of progress; true if anything happened.
  bool step_locked(Clock::time_point now);
  void handle_wc(const ibv_wc& wc, Clock::time_point now);

  // A completed receive: ChunkReceiver (chunk_rx.cc) checks and admits it, the protocol takes it.
  void handle_recv(uint32_t j, uint32_t byte_len, Clock::time_point now);
  void set_connected();
  void take_ack(const ChunkHeader& h, Clock::time_point now);
  void go_back_n(Clock::time_point now);
  void complete_send(const UserSend& f);  // its completion, and its bytes counted
  bool pump_sends(Clock::time_point now);

  // Copies accepted chunks, in order, into the posted user receives.
  bool deliver_held(Clock::time_point now);
  // Wakes whoever waits for this endpoint: cv_'s waiters, and the progress thread if it sleeps
  // in the device (VerbsApi::wait_cq). State changes go through it; posts through posted_locked.
  void kick_locked();
  // After a post: wakes the progress thread unless a poller is driving us (last_poll_).
  void posted_locked();
  // When the progress thread must look again though nothing arrives: the nearest of the
  // hello, heartbeat, retransmission, nack and liveness times; 10 ms at most.
  Clock::time_point next_timer_locked(Clock::time_point now) const;

  std::shared_ptr<Device> dev_;
  const VerbsApi& api_;
  VerbsCompletionQueue* scq_;
  VerbsCompletionQueue* rcq_;
  const EndpointOptions opts_;
  LinkCounter link_;  // counted where a successful completion is handed out
  Clock::duration hb_interval_;
  Clock::duration rto_ = kRto;
  uint32_t psn_ = 0;
  uint32_t session_ = 0;
  ibv_cq* vcq_ = nullptr;
  ibv_qp* qp_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::byte* staging_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  bool stop_ = false;
  bool attached_ = false;
  // When a poller of our completion queue last progressed us on its own thread (try_progress).
  // Within kPollerWindow of it the progress thread leaves the data path to the poller: it
  // waits on cv_ rather than in the device (so the peer's messages ring no one), and posts do
  // not wake it. A poller that goes to sleep in its queue ends the window (poller_leaving).
  Clock::time_point last_poll_{};
  bool device_waiting_ = false;   // the progress thread sleeps in wait_cq (mu_ released)
  State state_ = kIdle;
  Status error_;
  AddressBlob peer_{};
  bool heard_peer_ = false, hello_due_ = false;
  bool bye_posted_ = false, bye_done_ = false;
  int bye_slot_ = -1;
  Clock::time_point last_heard_, last_sent_, last_ack_progress_, last_retransmit_, last_nack_sent_, last_hello_;
  Clock::time_point tail_since_;  // when rx_.tail_due() was first seen (unset: not due)
  // The last liveness check (every loop of the progress thread, which naps 1 ms at most): a much
  // longer gap means this process did not run, not that the peer fell silent (unseen_stop).
  Clock::time_point last_liveness_check_{};
  // sender
  std::deque<UserSend> sends_;
  DataSlot dslots_[kDataSlots];
  bool ctrl_busy_[kCtrlSlots] = {};
  RmaSlot rma_[kRmaSlots];
  uint64_t next_seq_ = 0, acked_ = 0, peer_credit_ = kRecvSlots - kRecvReserve;
  // receiver
  ChunkReceiver rx_;  // checks, admission, the in-order window, reassembly (chunk_rx.cc)
  std::deque<UserRecv> recvs_;
  uint64_t last_credit_sent_ = 0, last_ack_sent_ = 0;
  EndpointStats stats_;
  std::optional<LinkSeal> seal_;  // sealed sessions (the provider holds the cluster secret)
};

}  // namespace lattice::fabric::verbs::detail
