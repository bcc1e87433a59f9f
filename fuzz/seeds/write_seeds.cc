// Writes the seeds of fuzz/corpus/handshake/, tcp_frame/ and verbs_frame/ from
// the code itself: handshake messages from real Handshake objects (with the
// harness's deterministic entropy, so a captured M1/M2/M3 replays), tcp frames
// as a real Conn puts them on the wire (its requests, captured off a
// socketpair) and as wire.h's make_header() builds the rest, verbs address
// blobs as encode_address() writes them.
//
//   cmake --build build --target fuzz_seeds && build/fuzz/fuzz_seeds
//   fuzz/corpus
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "fuzz/handshake_fixture.h"
#include "lattice/crypto/handshake.h"
#include "lattice/fabric/tcp/cq.h"
#include "lattice/fabric/tcp/endpoint.h"
#include "lattice/fabric/tcp/provider.h"
#include "lattice/fabric/verbs/address.h"
#include "lattice/fabric/verbs/wire.h"

using namespace lattice;

namespace {

std::filesystem::path root;

void put(const std::string &rel, const std::vector<uint8_t> &bytes) {
  auto p = root / rel;
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void must(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_seeds: %s failed\n", what);
    std::exit(1);
  }
}

// ---- handshake
// ------------------------------------------------------------------------------

void handshake_seeds(uint8_t opt, const std::string &tag) {
  auto ini = crypto::Handshake::create(crypto::Handshake::Role::kInitiator, fuzz::fixed_secret(),
                                       fuzz::options_from(opt & 15, 1));
  auto res = crypto::Handshake::create(crypto::Handshake::Role::kResponder, fuzz::fixed_secret(),
                                       fuzz::options_from(opt >> 4, 2));
  must(ini.ok() && res.ok(), "Handshake::create");
  auto m1 = ini->start();
  must(m1.ok(), "start");
  auto m2 = res->on_message(*m1);
  std::vector<uint8_t> reply = m2.ok() ? *m2 : res->take_reject();
  std::vector<uint8_t> m3;
  if (m2.ok()) {
    auto r = ini->on_message(*m2);
    must(r.ok(), "initiator on M2");
    m3 = *r;
  }
  std::vector<uint8_t> responder_side{0, opt};  // mode 0: what the responder reads
  responder_side.insert(responder_side.end(), m1->begin(), m1->end());
  responder_side.insert(responder_side.end(), m3.begin(), m3.end());
  put("handshake/responder-" + tag, responder_side);
  std::vector<uint8_t> initiator_side{1, opt};  // mode 1: what the initiator reads
  initiator_side.insert(initiator_side.end(), reply.begin(), reply.end());
  put("handshake/initiator-" + tag, initiator_side);
  std::vector<uint8_t> pair{2, opt};  // mode 2: untouched (no masks)
  put("handshake/pair-" + tag, pair);
  std::vector<uint8_t> flip{2, opt};
  flip.resize(2 + 104 + 50, 0);
  flip.back() = 0x80;  // one bit of M2's nonce
  put("handshake/pair-flip-" + tag, flip);
}

// ---- tcp
// ------------------------------------------------------------------------------------

std::vector<uint8_t> frame(fabric::tcp::FrameHeader h, const std::vector<uint8_t> &payload = {}) {
  h.payload_len = payload.size();
  std::vector<uint8_t> out(sizeof h);
  std::memcpy(out.data(), &h, sizeof h);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

void replace_key(std::vector<uint8_t> &s, uint64_t key, const char marker[8]) {
  for (size_t i = 0; i + 8 <= s.size(); ++i)
    if (std::memcmp(s.data() + i, &key, 8) == 0) std::memcpy(s.data() + i, marker, 8);
}

// Frames a real Conn sends for its requests: a send, a write, a write-with-imm,
// a read, two atomics, to the key the harness's marker stands for.
std::vector<uint8_t> captured_requests() {
  using namespace fabric;
  using namespace fabric::tcp;
  auto p = TcpProvider::create("127.0.0.1:0", ProviderOptions{});
  must(p.ok(), "TcpProvider::create");
  auto cq = (*p)->create_cq(64);
  auto mem = (*p)->allocate_memory(8192, kAllAccess);
  must(cq.ok() && mem.ok(), "cq/memory");
  for (size_t i = 0; i < 8192; ++i) (*mem)->data()[i] = std::byte(i * 13);
  int sv[2];
  must(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
  auto *tcq = static_cast<TcpCompletionQueue *>(cq->get());
  EndpointAddress local = (*p)->listen_address();
  local.nonce.fill(0xee);
  EndpointAddress peer = local;
  peer.nonce.fill(0x11);
  auto conn = std::make_shared<Conn>(p->get(), tcq, tcq, EndpointOptions{}, local, 1);
  auto ep = std::make_unique<TcpEndpoint>(p->get(), conn, tcq, tcq);
  conn->offer_incoming(sv[1], peer.nonce, "seed peer");
  must(ep->connect(peer.encode(), Deadline::after(std::chrono::seconds(5))).ok(), "connect");
  const uint64_t key = 0x5eed5eed5eed5eedull;
  must(ep->post_send({mem->get(), 0, 40}, 1).ok(), "send");
  must(ep->post_write({mem->get(), 64, 96}, {key, 256, 96}, 2).ok(), "write");
  must(ep->post_write_with_imm({mem->get(), 512, 8}, {key, 1024, 8}, 0xabcd, 3).ok(), "write imm");
  must(ep->post_read({mem->get(), 2048, 32}, {key, 4096, 32}, 4).ok(), "read");
  must(ep->post_fetch_add({mem->get(), 4096, 8}, {key, 8, 8}, 5, 5).ok(), "fetch add");
  must(ep->post_compare_swap({mem->get(), 4104, 8}, {key, 16, 8}, 0, 9, 6).ok(), "compare swap");
  std::vector<uint8_t> got;
  std::vector<Completion> done(16);
  for (int i = 0; i < 200; ++i) {
    (*cq)->poll(done);
    uint8_t buf[4096];
    ssize_t n;
    while ((n = ::recv(sv[0], buf, sizeof buf, MSG_DONTWAIT)) > 0) got.insert(got.end(), buf, buf + n);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ep.reset();
  ::close(sv[0]);
  replace_key(got, key, "REGIONRW");
  return got;
}

void tcp_seeds() {
  using namespace fabric::tcp;
  // Byte 0 is the harness's setup: 3 receives, a write, a read and a fetch-add
  // posted (0x1f), so requests and responses both have something to match.
  auto with_setup = [](uint8_t setup, std::vector<uint8_t> s) {
    s.insert(s.begin(), setup);
    return s;
  };
  std::vector<uint8_t> reqs = captured_requests();
  must(!reqs.empty(), "capturing a Conn's frames");
  put("tcp_frame/requests-captured", with_setup(0x03, reqs));
  std::vector<uint8_t> ro = reqs;
  for (size_t i = 0; i + 8 <= ro.size(); ++i)
    if (std::memcmp(ro.data() + i, "REGIONRW", 8) == 0) std::memcpy(ro.data() + i, "REGIONRO", 8);
  put("tcp_frame/requests-readonly-region", with_setup(0x01, ro));

  std::vector<uint8_t> s;
  auto hb = frame(make_header(FrameType::kHeartbeat));
  auto send = frame(make_header(FrameType::kSend), std::vector<uint8_t>(100, 'm'));
  // Answers to the harness's own requests: ids 1 (write), 2 (read), 3
  // (fetch-add).
  FrameHeader ack = make_header(FrameType::kAck);
  ack.req_id = 1;
  FrameHeader rr = make_header(FrameType::kReadResp);
  rr.req_id = 2;
  FrameHeader ar = make_header(FrameType::kAtomicResp);
  ar.req_id = 3;
  ar.arg0 = 41;
  for (auto &part : {hb, send, frame(ack), frame(rr, std::vector<uint8_t>(64, 'r')), frame(ar), hb})
    s.insert(s.end(), part.begin(), part.end());
  put("tcp_frame/responses", with_setup(0x1f, s));
  FrameHeader err = make_header(FrameType::kError);
  err.imm = 3;
  std::string why = "peer 2 says: bad frame";
  put("tcp_frame/error", with_setup(0x00, frame(err, std::vector<uint8_t>(why.begin(), why.end()))));
  std::vector<uint8_t> many;
  for (int i = 0; i < 6; ++i) many.insert(many.end(), send.begin(), send.end());
  put("tcp_frame/unexpected-sends", with_setup(0x20, many));
}

// ---- verbs: address blobs as an endpoint encodes them (staged/UC and RC)
// --------------------

void verbs_seeds() {
  using namespace fabric::verbs;
  AddressBlob b{};
  b.mode = static_cast<uint8_t>(Mode::kStaged);
  b.port = 2;
  const uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 7, 2};  // ::ffff:192.168.7.2
  std::memcpy(b.gid, gid, 16);
  b.qpn = 0x000123;
  b.psn = 0x00abcd;
  b.session = 0x5e551011;
  b.slot_bytes = kSlotBytes;
  b.recv_slots = kRecvSlots;
  auto staged = encode_address(b);
  put("verbs_frame/staged-apple-tb5",
      std::vector<uint8_t>(reinterpret_cast<const uint8_t *>(staged.data()),
                           reinterpret_cast<const uint8_t *>(staged.data()) + staged.size()));
  b.mode = static_cast<uint8_t>(Mode::kRc);
  b.port = 1;
  b.qpn = 0xfffffe;
  auto rc = encode_address(b);
  put("verbs_frame/rc-linux", std::vector<uint8_t>(reinterpret_cast<const uint8_t *>(rc.data()),
                                                   reinterpret_cast<const uint8_t *>(rc.data()) + rc.size()));
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds CORPUS_DIR\n");
    return 2;
  }
  root = argv[1];
  handshake_seeds(0x00, "default");
  handshake_seeds(0x99,
                  "chacha-context-b");  // both sides: context b, ChaCha20-Poly1305 only
  handshake_seeds(0x22, "insecure");    // both ask for --insecure
  handshake_seeds(0x02,
                  "insecure-mismatch");       // only the initiator does: an authenticated refusal
  handshake_seeds(0x10, "context-mismatch");  // a reject (mac1 fails)
  tcp_seeds();
  verbs_seeds();
  std::printf("fuzz_seeds: wrote %s/handshake, tcp_frame and verbs_frame\n", argv[1]);
  return 0;
}
