// Endpoints of the tcp provider: one TCP connection per endpoint, carrying the frames of
// wire.h. The public TcpEndpoint owns a shared Conn; the provider's background thread and the
// completion queues hold it too, so a Conn outlives racing progress calls.
//
// Conn is one class implemented along its seams, one file each:
//   socket.cc     dialing, set-up I/O with deadlines, sockets handed over by the listener (socket.h)
//   handshake.cc  connect(): who dials, the Hello exchange, the sealed sessions' crypto handshake
//   frame_tx.cc   transmit: frame queue, sealing, sendmsg gathering from the caller's memory
//   frame_rx.cc   receive: staging, frame parsing and validation, opening, one-sided targets
//   endpoint.cc   posting, failure and completion, progress and liveness, TcpEndpoint
//
// Connection set-up: both sides call connect(peer_blob). The side with the smaller
// (family, ip, port, nonce) dials the peer's provider listener and sends a Hello naming the
// peer endpoint's nonce; the listener (background thread) validates it and hands the socket
// to that endpoint, whose connect() checks the dialer's nonce against the blob it was given.
//
// Progress (Conn::mu_ held; callers use try_lock so two threads never fight over a socket):
//   tx: frames queue in tx_; sendmsg() gathers header + payload straight from the user's
//       buffer (payloads <= kMaxInline are copied into the frame at post time), at most
//       kMaxWriteBytes per call, a large payload in rounds until the socket is full. A send
//       completes once the kernel took all its bytes; one-sided operations complete when the
//       target's response arrives (it confirms the access was checked and applied).
//   rx: bytes are read into a 64 KiB staging buffer and parsed there; a payload's remainder
//       beyond what was staged is read straight into its destination (posted receive, target
//       region, read buffer) when it is large.
//   Unexpected sends (no receive posted): messages <= kMaxUnexpectedMsg are buffered, up to
//       kMaxUnexpectedBytes / kMaxUnexpectedCount per endpoint; beyond that the endpoint stops
//       reading the socket (TCP backpressure) until a receive is posted; the message then
//       lands directly in it. While stalled this way the peer's silence is not held against it.
//   Target side: writes land straight in the region and are acknowledged (kAck) once applied;
//       reads are answered from the region without a copy (zero-copy sendmsg); atomics run as
//       std::atomic_ref on the word, so they are atomic across endpoints and threads. At most
//       kMaxQueuedResponses responses wait in tx_; beyond that the endpoint stops reading.
//   Who progresses: the caller's thread in CompletionQueue::poll/wait; the provider's background
//       thread when no caller has polled for ~2 ms and none sleeps in wait() (it takes over within
//       ~10 ms of the caller going quiet, see provider.cc); posts write to the socket directly.
//   Liveness: a heartbeat goes out when nothing was sent for peer_timeout/4; no byte from the
//       peer for peer_timeout -> kPeerLost; EOF/reset -> kPeerLost at once; while reading is
//       paused by us, a peer that reads nothing of ours for peer_timeout -> kPeerLost.
//   Sealed sessions (the provider holds the cluster secret; wire.h): connect() runs the crypto
//       handshake after the Hello (responder side: a peer failing it is refused and the
//       endpoint keeps waiting for the real one until the deadline). Every frame is sealed at
//       enqueue time (so sequence numbers follow wire order) out of place into a pooled tx
//       buffer; received payloads land as ciphertext and are opened in place once their tag
//       is in. Any authentication failure fails the endpoint with kAuthFailed.
//   Any protocol violation (bad version, flags, type, length, unknown key, out-of-bounds or
//       forbidden access, unexpected response) fails this endpoint only: its operations
//       complete with the error, a kError frame tells the peer why, the socket is shut down.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "lattice/crypto/aead.h"
#include "lattice/fabric/fabric.h"
#include "lattice/fabric/tcp/address.h"
#include "lattice/fabric/tcp/memory.h"
#include "lattice/fabric/tcp/wire.h"

namespace lattice::fabric::tcp {

class TcpProvider;
class TcpCompletionQueue;

inline constexpr size_t kMaxInline = 192;                 // payload copied at post time
inline constexpr uint64_t kMaxMessage = uint64_t{1} << 30;  // caps.max_msg
inline constexpr size_t kMaxUnexpectedMsg = 64 * 1024;
inline constexpr size_t kMaxUnexpectedBytes = 4 * 1024 * 1024;
inline constexpr size_t kMaxUnexpectedCount = 4096;
inline constexpr size_t kMaxOutstanding = 65536;          // per endpoint, send side and recv side
inline constexpr size_t kMaxQueuedResponses = 4096;       // target side: stop reading beyond this
inline constexpr size_t kStagingBytes = 64 * 1024;
inline constexpr size_t kDirectReadMin = 8 * 1024;        // read payload tails this big in place
inline constexpr size_t kSmallStageRead = 4096;           // staging read size after a large frame
// Bytes handed to one sendmsg() at most. One call holds the socket lock while it copies: the
// peer's acknowledgements wait behind it and the receiver's copy cannot overlap ours. Measured
// on loopback, 1 MiB ping-pong half round trip: 380-440 us in one call, 190-210 us in 512 KiB
// calls (256 KiB: 175-300 us, 128 KiB: worse).
inline constexpr size_t kMaxWriteBytes = 512 * 1024;
// Sealed sessions read a large payload in pieces of at most this and decrypt each as it lands,
// while the kernel's copy left it in cache (one pass over memory instead of two).
inline constexpr size_t kStreamOpenPiece = 128 * 1024;

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(TcpProvider* provider, TcpCompletionQueue* send_cq, TcpCompletionQueue* recv_cq,
       const EndpointOptions& options, EndpointAddress local, uint64_t id);
  ~Conn();

  std::vector<std::byte> local_address() const { return local_.encode(); }
  const Nonce& nonce() const { return local_.nonce; }
  uint64_t id() const { return id_; }
  Status connect(std::span<const std::byte> peer_address, Deadline deadline);

  Status post_send(LocalSlice src, WorkId id);
  Status post_recv(LocalSlice dst, WorkId id);
  Status post_write(LocalSlice src, RemoteSlice dst, uint32_t imm, bool with_imm, WorkId id);
  Status post_read(LocalSlice dst, RemoteSlice src, WorkId id);
  Status post_atomic(LocalSlice result, RemoteSlice target, FrameType type, uint64_t a, uint64_t b, WorkId id);

  Status release_buffer(WorkId id);
  Status status() const;
  int peer_rank() const { return options_.peer_rank; }
  LinkBytes link_bytes() const { return link_.get(); }
  // The endpoint is being destroyed: cancel its work, shut the socket.
  void close();

  // --- progress -------------------------------------------------------------------------
  // Caller's thread (CQ poll/wait): try-lock, progress, remember the caller is active.
  void progress_from_caller();
  // Background thread, on socket readiness (`events` from epoll): try-lock, progress, re-arm
  // the socket in epoll. Returns false when the socket should be re-armed later instead (the
  // lock was taken, or reading is paused and the kernel keeps reporting a hang-up).
  bool progress_from_background(uint32_t events);
  // Background thread, every heartbeat interval: liveness and heartbeats.
  void tick();
  // True when a caller progressed recently or sleeps on this endpoint's CQ: the background
  // thread leaves the socket to it.
  bool caller_active() const;
  void rearm();
  // Set by the background thread while it holds this endpoint on its recheck list (its socket
  // disarmed in epoll, revisited within kRecheckActive): caller-side paths then leave the
  // socket disarmed instead of re-arming it, since the background thread looks again soon
  // anyway. An armed socket costs every packet a wake-up of the background thread, which
  // only finds the caller busy (~10 a call in a 4-rank 1 MiB all-reduce over loopback).
  std::atomic<bool> parked{false};
  Clock::duration heartbeat_interval() const { return options_.peer_timeout / 4; }
  // For wait(): the socket to sleep on (-1: none, not connected or failed) and the poll(2)
  // events to wait for.
  int poll_fd(short* events) const;
  std::atomic<int> sleepers{0};

  // The listener matched an incoming connection's Hello to this endpoint. Takes `fd`.
  void offer_incoming(int fd, const Nonce& from, std::string peer_text);

 private:
  struct TxOp {
    FrameHeader hdr;
    std::byte inline_data[kMaxInline];
    size_t inline_len = 0;
    const std::byte* payload = nullptr;  // not owned (user or region memory), or owned_text
    size_t payload_len = 0;
    size_t done = 0;
    bool completes = false;    // a send: completes (kSend) when written
    bool is_response = false;  // counts against kMaxQueuedResponses
    WorkId id = 0;
    size_t bytes = 0;
    std::unique_ptr<std::byte[]> sealed;  // sealed sessions: header tag | ciphertext | tag
    size_t sealed_cap = 0;
    std::unique_ptr<std::byte[]> released;  // release_buffer(): the payload, copied aside
    size_t total() const { return sizeof(FrameHeader) + inline_len + payload_len; }
  };
  struct PendingOp {  // a one-sided request awaiting its response
    uint64_t req_id;
    Opcode op;
    WorkId id;
    std::byte* local;  // read destination / atomic result
    size_t len;
  };
  struct RecvOp {
    WorkId id;
    std::byte* buf;
    size_t cap;
    bool released = false;  // release_buffer(): the message it matches is dropped
  };
  struct Unexpected {
    bool is_imm;
    uint32_t imm;
    std::vector<std::byte> data;
  };
  enum class Rx { kHeader, kPayload, kTrailer, kStalled, kDead };
  enum class Finish { kNone, kRecvMsg, kUnexpectedMsg, kWrite, kWriteImm, kReadResp, kErrorText };

  std::string peer_text() const;
  Status check_local(const LocalSlice& s, const char* what) const;
  Status check_postable() const;
  Status dial(const EndpointAddress& peer, Deadline deadline, int* out_fd);
  Status accept_from(const EndpointAddress& peer, Deadline deadline, int* out_fd);
  // Sealed sessions: the crypto handshake on a fresh socket (dialer = initiator).
  Result<crypto::SessionCipher> secure_handshake(int fd, bool initiator, const EndpointAddress& peer,
                                                 Deadline deadline);

  // All below: mu_ held.
  void progress_locked(Clock::time_point now);
  void flush_tx();
  void read_rx();
  bool parse_staged();  // false: stop reading
  Status begin_frame();
  void finish_frame();
  void payload_done();      // the payload is in: sealed sessions read its tag first
  void begin_stream_open();  // sealed: open a large payload piece by piece as it lands
  bool open_landed();        // decrypts what landed since the last call; false: failed
  Status seal_op(TxOp& op);  // sealed sessions: copy + encrypt the op's bytes
  void recycle(TxOp& op);   // keeps a sent op's sealed buffer for the next one
  size_t head_bytes() const { return sizeof(FrameHeader) + (cipher_ ? kSealTagBytes : 0); }
  Status check_access(uint64_t key, uint64_t offset, uint64_t len, uint32_t right, const char* what,
                      RegionInfo* out);
  void match_unexpected();
  void enqueue(TxOp&& op);
  void enqueue_response(FrameHeader h, const std::byte* payload, size_t len);
  void fail(Status s, bool tell_peer, bool routine = false);
  void complete_send_side(WorkId id, Opcode op, Status s, size_t bytes);
  void complete_recv_side(WorkId id, Opcode op, Status s, size_t bytes, uint32_t imm);
  void check_liveness(Clock::time_point now);
  void enqueue_heartbeat();

  TcpProvider* const provider_;
  TcpCompletionQueue* const send_cq_;
  TcpCompletionQueue* const recv_cq_;
  const EndpointOptions options_;
  const EndpointAddress local_;
  const uint64_t id_;

  // Connection set-up (connect_mu_): sockets the listener handed over.
  std::mutex connect_mu_;
  std::condition_variable connect_cv_;
  struct Incoming {
    int fd;
    Nonce from;
    std::string peer_text;
  };
  std::vector<Incoming> incoming_;
  bool connecting_done_ = false;

  mutable std::mutex mu_;
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  Status error_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> want_write_{false};
  // Caller-side wish for the background thread's help: re-arm unless it holds us (parked).
  void arm_for_background() {
    if (!parked.load(std::memory_order_relaxed)) rearm();
  }
  std::atomic<int> poll_fd_{-1};
  std::atomic<bool> rx_paused_{false};  // stalled on a receive or on queued responses
  std::atomic<int64_t> last_caller_ns_{0};
  EndpointAddress peer_{};
  std::string peer_addr_text_ = "<not connected>";

  std::deque<TxOp> tx_;
  size_t queued_responses_ = 0;
  uint64_t next_req_id_ = 1;
  std::deque<PendingOp> pending_;
  std::deque<RecvOp> recvs_;
  std::deque<Unexpected> unexpected_;
  size_t unexpected_bytes_ = 0;
  size_t outstanding_send_side_ = 0;  // tx completions + pending responses

  Rx rx_ = Rx::kHeader;
  std::vector<std::byte> staging_;
  size_t stage_r_ = 0, stage_w_ = 0;
  FrameHeader cur_{};
  Finish finish_ = Finish::kNone;
  std::byte* sink_ = nullptr;
  uint64_t sink_left_ = 0;
  uint64_t discard_left_ = 0;
  size_t sink_len_ = 0;                  // bytes the sink receives in total
  std::vector<std::byte> unexpected_buf_;  // kUnexpectedMsg / kErrorText sink
  bool last_frame_large_ = false;
  std::optional<crypto::SessionCipher> cipher_;  // set at connect for sealed sessions
  std::vector<std::pair<std::unique_ptr<std::byte[]>, size_t>> seal_pool_;  // spare tx buffers
  std::vector<std::byte> rx_scratch_;            // sealed: a truncated message is opened here
  bool sink_scratch_ = false;
  bool rx_stream_ = false;           // the current payload is being opened as it lands
  std::byte* rx_opened_ = nullptr;   // ... up to here

  LinkCounter link_;  // counted as completions are handed out

  Clock::time_point last_rx_{};
  Clock::time_point last_tx_{};
  Clock::time_point last_tx_progress_{};
  // When check_liveness last ran (at least every heartbeat interval / 2, from the provider's
  // thread): a much longer gap means this process did not run (unseen_stop).
  Clock::time_point last_check_{};
};

class TcpEndpoint final : public Endpoint {
 public:
  TcpEndpoint(TcpProvider* provider, std::shared_ptr<Conn> conn, TcpCompletionQueue* send_cq,
              TcpCompletionQueue* recv_cq);
  ~TcpEndpoint() override;

  std::vector<std::byte> local_address() const override { return conn_->local_address(); }
  Status connect(std::span<const std::byte> peer_address, Deadline deadline) override {
    return conn_->connect(peer_address, deadline);
  }
  Status post_send(LocalSlice src, WorkId id) override { return conn_->post_send(src, id); }
  Status post_recv(LocalSlice dst, WorkId id) override { return conn_->post_recv(dst, id); }
  Status post_write(LocalSlice src, RemoteSlice dst, WorkId id) override {
    return conn_->post_write(src, dst, 0, false, id);
  }
  Status post_write_with_imm(LocalSlice src, RemoteSlice dst, uint32_t imm, WorkId id) override {
    return conn_->post_write(src, dst, imm, true, id);
  }
  Status post_read(LocalSlice dst, RemoteSlice src, WorkId id) override { return conn_->post_read(dst, src, id); }
  Status post_fetch_add(LocalSlice result, RemoteSlice target, uint64_t add, WorkId id) override {
    return conn_->post_atomic(result, target, FrameType::kFetchAdd, add, 0, id);
  }
  Status post_compare_swap(LocalSlice result, RemoteSlice target, uint64_t expected, uint64_t desired,
                           WorkId id) override {
    return conn_->post_atomic(result, target, FrameType::kCompareSwap, expected, desired, id);
  }
  Status release_buffer(WorkId id) override { return conn_->release_buffer(id); }
  Result<std::unique_ptr<RemoteMapping>> map_remote(RemoteSlice, uint32_t) override {
    return Unavailable("tcp: a peer's memory cannot be mapped across a network (post_write/post_read it)");
  }
  Status status() const override { return conn_->status(); }
  int peer_rank() const override { return conn_->peer_rank(); }
  LinkBytes link_bytes() const override { return conn_->link_bytes(); }

 private:
  TcpProvider* provider_;
  std::shared_ptr<Conn> conn_;
  TcpCompletionQueue* send_cq_;
  TcpCompletionQueue* recv_cq_;
};

}  // namespace lattice::fabric::tcp
