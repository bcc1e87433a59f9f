// The handshake seam of the tcp endpoint: Conn::connect decides who dials (the smaller address),
// the dialer's Hello exchange checks it reached the right endpoint with the same protocol and
// sealing, and sealed sessions then run the crypto handshake bound to both endpoints' nonces.
#include <unistd.h>

#include <cstring>

#include "lattice/core/fd_io.h"
#include "lattice/core/log.h"
#include "lattice/crypto/handshake.h"
#include "lattice/fabric/tcp/endpoint.h"
#include "lattice/fabric/tcp/provider.h"
#include "lattice/fabric/tcp/socket.h"

namespace lattice::fabric::tcp {

namespace {

std::string nonce_hex(const Nonce& n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : n) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

}  // namespace

Status Conn::connect(std::span<const std::byte> peer_address, Deadline deadline) {
  LATTICE_ASSIGN_OR_RETURN(EndpointAddress peer, EndpointAddress::decode(peer_address));
  {
    std::lock_guard lock(mu_);
    if (!error_.ok()) return error_;
    if (connected_) return InvalidArgument("tcp endpoint is already connected to " + peer_text());
    if (peer == local_) return InvalidArgument("tcp endpoint cannot connect to itself");
    peer_addr_text_ = peer.to_string();
  }
  int fd = -1;
  std::optional<crypto::SessionCipher> cipher;
  const bool sealed = provider_->secret().has_value();
  if (local_ < peer) {
    LATTICE_RETURN_IF_ERROR(dial(peer, deadline, &fd));
    if (sealed) {
      auto c = secure_handshake(fd, /*initiator=*/true, peer, deadline);
      if (!c.ok()) {
        ::close(fd);
        return c.status();
      }
      cipher.emplace(std::move(*c));
    }
  } else {
    Status last_refusal;
    for (;;) {
      Status s = accept_from(peer, deadline, &fd);
      if (!s.ok()) {
        // A peer that kept failing the handshake is the likelier story than a slow one.
        if (s.code() == ErrorCode::kTimeout && !last_refusal.ok()) return last_refusal;
        return s;
      }
      if (!sealed) break;
      auto c = secure_handshake(fd, /*initiator=*/false, peer, deadline);
      if (c.ok()) {
        cipher.emplace(std::move(*c));
        break;
      }
      // Whoever dialed with the right nonce failed to prove the secret: refuse it and keep
      // waiting for the real peer until the deadline.
      ::close(fd);
      last_refusal = c.status();
      LATTICE_LOG_WARN("tcp: refused a connection claiming to be {}: {}", peer.to_string(), c.status().to_string());
      bool closed;
      {
        std::lock_guard lock(mu_);
        closed = closed_;
      }
      if (closed) return Cancelled("tcp endpoint closed while connecting");
      std::lock_guard lock(connect_mu_);
      connecting_done_ = false;
    }
  }
  tune_socket(fd);
  {
    std::lock_guard lock(mu_);
    if (closed_) {
      ::close(fd);
      return Cancelled("tcp endpoint closed while connecting");
    }
    fd_ = fd;
    if (cipher) cipher_.emplace(std::move(*cipher));
    peer_ = peer;
    connected_ = true;
    staging_.resize(kStagingBytes);
    last_rx_ = last_tx_ = last_tx_progress_ = Clock::now();
    poll_fd_.store(fd);
  }
  provider_->add_connected(shared_from_this(), fd);
  LATTICE_LOG_DEBUG("tcp endpoint connected to {}", peer_text());
  return Status::Ok();
}

Status Conn::dial(const EndpointAddress& peer, Deadline deadline, int* out_fd) {
  const int rank = options_.peer_rank;
  const std::string who = describe_peer(peer, rank);
  LATTICE_ASSIGN_OR_RETURN(const int fd, dial_socket(peer, deadline, who, rank));
  const bool sealed = provider_->secret().has_value();
  Hello hello = make_hello(local_.nonce.data(), peer.nonce.data());
  hello.flags = sealed ? kHelloFlagSealed : 0;
  Status s = send_setup(fd, &hello, sizeof hello, deadline, who, rank);
  Hello reply{};
  if (s.ok()) s = read_setup(fd, &reply, sizeof reply, deadline, who, rank);
  if (s.ok()) {
    if (std::memcmp(reply.magic, kHelloMagic, sizeof reply.magic) != 0) {
      s = Corrupt(who + " did not answer with a lattice tcp hello (bad magic)", rank);
    } else if (reply.version != kWireVersion) {
      s = Corrupt(who + " speaks tcp protocol version " + std::to_string(reply.version) + ", we speak " +
                      std::to_string(kWireVersion),
                  rank);
    } else if (reply.size == sizeof(Hello) && reply.flags == (sealed ? 0u : kHelloFlagSealed)) {
      s = InvalidArgument(who + (sealed ? " runs plaintext (no cluster secret) but we require encryption"
                                        : " requires encryption (cluster secret) but we run plaintext"));
    } else if (reply.size != sizeof(Hello) || reply.flags != (sealed ? kHelloFlagSealed : 0u)) {
      s = Corrupt(who + " sent a malformed hello (size " + std::to_string(reply.size) + ", flags " +
                      std::to_string(reply.flags) + ")",
                  rank);
    } else if (std::memcmp(reply.from, peer.nonce.data(), 16) != 0 ||
               std::memcmp(reply.to, local_.nonce.data(), 16) != 0) {
      s = Corrupt(who + " answered for another endpoint (nonce mismatch)", rank);
    }
  }
  if (!s.ok()) {
    ::close(fd);
    return s;
  }
  *out_fd = fd;
  return Status::Ok();
}

Result<crypto::SessionCipher> Conn::secure_handshake(int fd, bool initiator, const EndpointAddress& peer,
                                                    Deadline deadline) {
  const int rank = options_.peer_rank;
  const std::string who = describe_peer(peer, rank);
  crypto::HandshakeOptions ho;
  // Binds the session to this very link: the dialer's and the acceptor's endpoint nonces.
  ho.context = "lattice tcp v1 " + (initiator ? nonce_hex(local_.nonce) + ">" + nonce_hex(peer.nonce)
                                              : nonce_hex(peer.nonce) + ">" + nonce_hex(local_.nonce));
  auto role = initiator ? crypto::Handshake::Role::kInitiator : crypto::Handshake::Role::kResponder;
  LATTICE_ASSIGN_OR_RETURN(crypto::Handshake hs, crypto::Handshake::create(role, *provider_->secret(), ho));
  auto ctx = [&](const Status& st) {
    if (st.code() == ErrorCode::kAuthFailed)
      return AuthFailed("handshake with " + who + " failed (does it hold the same cluster secret?): " + st.message(),
                        rank);
    return st.with_context("handshake with " + who);
  };
  if (initiator) {
    LATTICE_ASSIGN_OR_RETURN(std::vector<uint8_t> m1, hs.start());
    LATTICE_RETURN_IF_ERROR(send_setup(fd, m1.data(), m1.size(), deadline, who, rank));
  }
  while (!hs.done()) {
    size_t n = hs.next_message_bytes();
    if (n == 0) return AuthFailed("handshake with " + who + " stalled", rank);
    std::vector<uint8_t> in(n);
    Status s = read_setup(fd, in.data(), n, deadline, who, rank);
    if (!s.ok()) {
      if (s.code() == ErrorCode::kPeerLost && initiator)
        return AuthFailed("handshake with " + who + ": it hung up (does it hold the same cluster secret?)", rank);
      return s;
    }
    auto out = hs.on_message(in);
    if (!out.ok()) {
      std::vector<uint8_t> reject = hs.take_reject();
      if (!reject.empty()) (void)lattice::write_all(fd, reject.data(), reject.size(), Deadline::now());  // best effort
      return ctx(out.status());
    }
    if (!out->empty()) LATTICE_RETURN_IF_ERROR(send_setup(fd, out->data(), out->size(), deadline, who, rank));
  }
  LATTICE_ASSIGN_OR_RETURN(crypto::Session session, hs.session());
  LATTICE_LOG_DEBUG("tcp: sealed session {} with {} ({})", session.session_id_hex(), who,
                    crypto::to_string(session.cipher));
  return crypto::SessionCipher::create(session.cipher, session.keys);
}

}  // namespace lattice::fabric::tcp
