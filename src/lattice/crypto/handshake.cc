#include "lattice/crypto/handshake.h"

#include <sodium.h>

#include <cstring>
#include <string>

#include "lattice/core/log.h"
#include "lattice/crypto/sodium.h"

namespace lattice::crypto {

static_assert(crypto_scalarmult_BYTES == 32 && crypto_scalarmult_SCALARBYTES == 32);
static_assert(crypto_kdf_CONTEXTBYTES == 8 && crypto_kdf_KEYBYTES == 32);

namespace {

using Bytes32 = std::array<uint8_t, 32>;

constexpr uint8_t cipher_bit(Cipher c) { return static_cast<uint8_t>(1u << (static_cast<uint8_t>(c) - 1)); }

// Incremental (keyed) BLAKE2b-256 over several parts.
class Hasher {
 public:
  explicit Hasher(const uint8_t* key = nullptr, size_t key_len = 0) {
    crypto_generichash_init(&st_, key, key_len, 32);
  }
  Hasher& add(const void* p, size_t n) {
    crypto_generichash_update(&st_, static_cast<const uint8_t*>(p), n);
    return *this;
  }
  Hasher& add(std::string_view s) { return add(s.data(), s.size()); }
  Hasher& add_context(const std::string& c) {
    uint8_t len[4];
    for (int i = 0; i < 4; ++i) len[i] = static_cast<uint8_t>(c.size() >> (8 * i));
    return add(len, 4).add(c.data(), c.size());
  }
  Bytes32 finish() {
    Bytes32 out;
    crypto_generichash_final(&st_, out.data(), out.size());
    return out;
  }
  ~Hasher() { sodium_memzero(&st_, sizeof st_); }

 private:
  crypto_generichash_state st_;
};

Bytes32 kdf(const Bytes32& key, uint64_t id, const char ctx[9]) {
  Bytes32 out;
  crypto_kdf_derive_from_key(out.data(), out.size(), id, ctx, key.data());
  return out;
}

void wipe(Bytes32& b) { sodium_memzero(b.data(), b.size()); }

wire::Header make_header(uint8_t type, uint8_t cipher, uint8_t flags) {
  wire::Header h{};
  std::memcpy(h.magic, wire::kMagic, 4);
  h.version = wire::kVersion;
  h.type = type;
  h.cipher = cipher;
  h.flags = flags;
  return h;
}

template <class T>
std::vector<uint8_t> to_bytes(const T& msg) {
  const auto* p = reinterpret_cast<const uint8_t*>(&msg);
  return std::vector<uint8_t>(p, p + sizeof msg);
}

}  // namespace

std::string Session::session_id_hex() const {
  char hex[2 * 16 + 1];
  sodium_bin2hex(hex, sizeof hex, session_id.data(), session_id.size());
  return hex;
}

struct Handshake::Impl {
  enum class State { kIdle, kSentHello, kSentReply, kDone, kFailed };

  Role role;
  ClusterSecret secret;
  HandshakeOptions options;
  State state = State::kIdle;
  Status failure;
  std::vector<uint8_t> reject;

  Bytes32 eph_secret{};
  Bytes32 eph_public{};
  wire::Hello m1{};  // kept by both sides: the transcript starts with it
  Bytes32 transcript{};
  Bytes32 key_i2r{}, key_r2i{}, confirm_r{}, confirm_i{};
  Session session;

  Impl(Role r, const ClusterSecret& s, HandshakeOptions o) : role(r), secret(s), options(std::move(o)) {}
  ~Impl() {
    wipe(eph_secret);
    wipe(key_i2r);
    wipe(key_r2i);
    wipe(confirm_r);
    wipe(confirm_i);
  }

  const char* who() const { return role == Role::kInitiator ? "initiator" : "responder"; }

  Status fail(Status s) {
    state = State::kFailed;
    failure = s.with_context(std::string("handshake (") + who() + ", context '" + options.context + "')");
    wipe(eph_secret);
    return failure;
  }
  Status fail_and_reject(Status s, uint8_t reason) {
    wire::Hello r{};
    r.header = make_header(wire::kReject, reason, 0);
    reject = to_bytes(r);
    return fail(std::move(s));
  }

  uint8_t cipher_mask() const {
    uint8_t mask = 0;
    for (Cipher c : options.ciphers)
      if (cipher_available(c)) mask |= cipher_bit(c);
    return mask;
  }

  void new_ephemeral(uint8_t nonce[32]) {
    if (options.entropy) {
      options.entropy({nonce, 32});
      options.entropy(eph_secret);
    } else {
      randombytes_buf(nonce, 32);
      randombytes_buf(eph_secret.data(), eph_secret.size());
    }
    crypto_scalarmult_base(eph_public.data(), eph_secret.data());
  }

  Bytes32 mac1_of(const wire::Hello& m) const {
    Bytes32 k = kdf(secret.bytes(), 1, "lathello");
    Hasher h(k.data(), k.size());
    h.add("m1").add_context(options.context).add(&m.header, sizeof m.header).add(m.nonce, 32).add(m.ephemeral, 32);
    wipe(k);
    return h.finish();
  }

  // From M1 and the reply's header, nonce and key: the transcript, the shared secret and
  // every derived key. False if the peer's ephemeral key is degenerate.
  bool derive(const wire::Hello& reply, const uint8_t peer_ephemeral[32]) {
    transcript = Hasher()
                     .add("transcript")
                     .add_context(options.context)
                     .add(&m1, sizeof m1)
                     .add(&reply.header, sizeof reply.header)
                     .add(reply.nonce, 32)
                     .add(reply.ephemeral, 32)
                     .finish();
    Bytes32 dh;
    if (crypto_scalarmult(dh.data(), eph_secret.data(), peer_ephemeral) != 0) return false;
    wipe(eph_secret);
    Hasher mh(secret.bytes().data(), secret.bytes().size());
    Bytes32 master = mh.add("master").add(dh.data(), dh.size()).add(transcript.data(), transcript.size()).finish();
    wipe(dh);
    key_i2r = kdf(master, 1, "lathsv01");
    key_r2i = kdf(master, 2, "lathsv01");
    confirm_r = kdf(master, 3, "lathsv01");
    confirm_i = kdf(master, 4, "lathsv01");
    Bytes32 id = kdf(master, 5, "lathsv01");
    std::memcpy(session.session_id.data(), id.data(), session.session_id.size());
    wipe(master);
    return true;
  }

  Bytes32 mac2() const {
    return Hasher(confirm_r.data(), confirm_r.size()).add("m2").add(transcript.data(), transcript.size()).finish();
  }
  Bytes32 mac3(const wire::Header& h) const {
    return Hasher(confirm_i.data(), confirm_i.size())
        .add("m3")
        .add(transcript.data(), transcript.size())
        .add(&h, sizeof h)
        .finish();
  }

  static bool header_ok(const wire::Header& h) {
    return std::memcmp(h.magic, wire::kMagic, 4) == 0 && h.version == wire::kVersion;
  }

  Result<std::vector<uint8_t>> responder_hello(std::span<const uint8_t> msg) {
    if (msg.size() != sizeof(wire::Hello)) return fail(AuthFailed("malformed hello: " + std::to_string(msg.size()) + " bytes, expected 104"));
    std::memcpy(&m1, msg.data(), sizeof m1);
    if (!header_ok(m1.header) || m1.header.type != wire::kHello)
      return fail_and_reject(AuthFailed("malformed hello (not a lattice handshake, or another version)"), wire::kRejectAuth);
    Bytes32 want = mac1_of(m1);
    if (crypto_verify_32(want.data(), m1.mac) != 0) {
      LATTICE_LOG_WARN("refused a join (context '{}'): the peer does not hold this cluster's secret (ours has fingerprint {})",
                       options.context, secret.fingerprint());
      return fail_and_reject(AuthFailed("the peer does not hold the cluster secret (hello MAC mismatch); refused"),
                             wire::kRejectAuth);
    }
    const bool peer_insecure = (m1.header.flags & wire::kFlagInsecure) != 0;
    if (peer_insecure != options.insecure)
      return fail_and_reject(InvalidArgument(std::string("the peer ") + (peer_insecure ? "runs" : "does not run") +
                                             " with --insecure and we " + (options.insecure ? "do" : "do not")),
                             wire::kRejectInsecure);
    Cipher chosen{};
    bool found = false;
    for (Cipher c : options.ciphers)
      if (cipher_available(c) && (m1.header.cipher & cipher_bit(c))) {
        chosen = c;
        found = true;
        break;
      }
    if (!found) return fail_and_reject(Unavailable("no cipher in common with the peer"), wire::kRejectCipher);

    wire::Hello m2{};
    m2.header = make_header(wire::kReply, static_cast<uint8_t>(chosen), options.insecure ? wire::kFlagInsecure : 0);
    new_ephemeral(m2.nonce);
    std::memcpy(m2.ephemeral, eph_public.data(), 32);
    if (!derive(m2, m1.ephemeral)) return fail(AuthFailed("the peer's ephemeral key is degenerate"));
    Bytes32 mac = mac2();
    std::memcpy(m2.mac, mac.data(), 32);
    session.cipher = chosen;
    session.insecure = options.insecure;
    state = State::kSentReply;
    return to_bytes(m2);
  }

  Result<std::vector<uint8_t>> responder_confirm(std::span<const uint8_t> msg) {
    if (msg.size() != sizeof(wire::Confirm)) return fail(AuthFailed("malformed confirm: " + std::to_string(msg.size()) + " bytes, expected 40"));
    wire::Confirm m3;
    std::memcpy(&m3, msg.data(), sizeof m3);
    Bytes32 want = mac3(m3.header);
    if (!header_ok(m3.header) || m3.header.type != wire::kConfirm ||
        m3.header.cipher != static_cast<uint8_t>(session.cipher) ||
        m3.header.flags != (session.insecure ? wire::kFlagInsecure : 0) || crypto_verify_32(want.data(), m3.mac) != 0) {
      LATTICE_LOG_WARN("refused a join (context '{}'): the peer's confirmation failed (wrong secret, replay or tampering)",
                       options.context);
      return fail(AuthFailed("the peer's confirmation does not verify (replayed or tampered handshake); refused"));
    }
    session.keys.tx = key_r2i;
    session.keys.rx = key_i2r;
    state = State::kDone;
    return std::vector<uint8_t>{};
  }

  Result<std::vector<uint8_t>> initiator_reply(std::span<const uint8_t> msg) {
    if (msg.size() != sizeof(wire::Hello)) return fail(AuthFailed("malformed reply: " + std::to_string(msg.size()) + " bytes, expected 104"));
    wire::Hello m2;
    std::memcpy(&m2, msg.data(), sizeof m2);
    if (!header_ok(m2.header)) return fail(AuthFailed("malformed reply (not a lattice handshake, or another version)"));
    if (m2.header.type == wire::kReject) {
      switch (m2.header.cipher) {
        case wire::kRejectCipher: return fail(Unavailable("the peer refused us: no cipher in common"));
        case wire::kRejectInsecure: return fail(InvalidArgument("the peer refused us: --insecure is set on one side only"));
        default:
          return fail(AuthFailed("the peer refused us: it does not recognise our cluster secret (ours has fingerprint " +
                                 secret.fingerprint() + ") or our context"));
      }
    }
    if (m2.header.type != wire::kReply) return fail(AuthFailed("unexpected handshake message type " + std::to_string(m2.header.type)));
    if (!derive(m2, m2.ephemeral)) return fail(AuthFailed("the peer's ephemeral key is degenerate"));
    Bytes32 want = mac2();
    if (crypto_verify_32(want.data(), m2.mac) != 0)
      return fail(AuthFailed("the peer did not prove it holds the cluster secret (reply MAC mismatch: another secret, a "
                             "replayed reply, or a man in the middle)"));
    // Authenticated from here on: a mismatch is a genuine policy difference.
    const uint8_t cb = m2.header.cipher;
    const Cipher chosen = static_cast<Cipher>(cb);
    if ((cb != 1 && cb != 2) || (cipher_mask() & cipher_bit(chosen)) == 0)
      return fail(Unavailable("the peer chose a cipher we did not offer"));
    if (((m2.header.flags & wire::kFlagInsecure) != 0) != options.insecure)
      return fail(InvalidArgument("the peer's --insecure setting differs from ours"));
    wire::Confirm m3{};
    m3.header = make_header(wire::kConfirm, m2.header.cipher, m2.header.flags);
    Bytes32 mac = mac3(m3.header);
    std::memcpy(m3.mac, mac.data(), 32);
    session.cipher = chosen;
    session.insecure = options.insecure;
    session.keys.tx = key_i2r;
    session.keys.rx = key_r2i;
    state = State::kDone;
    return to_bytes(m3);
  }
};

Result<Handshake> Handshake::create(Role role, const ClusterSecret& secret, HandshakeOptions options) {
  LATTICE_RETURN_IF_ERROR(detail::ensure_sodium());
  if (options.ciphers.empty()) {
    options.ciphers.push_back(default_cipher());
    Cipher other = options.ciphers[0] == Cipher::kAes256Gcm ? Cipher::kChaCha20Poly1305 : Cipher::kAes256Gcm;
    if (cipher_available(other)) options.ciphers.push_back(other);
  }
  bool any = false;
  for (Cipher c : options.ciphers) any = any || cipher_available(c);
  if (!any) return Unavailable("none of the requested ciphers is available on this CPU");
  if (options.insecure)
    LATTICE_LOG_WARN("handshake context '{}': --insecure: traffic after authentication will NOT be encrypted",
                     options.context);
  return Handshake(std::make_unique<Impl>(role, secret, std::move(options)));
}

Handshake::Handshake(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Handshake::Handshake(Handshake&&) noexcept = default;
Handshake& Handshake::operator=(Handshake&&) noexcept = default;
Handshake::~Handshake() = default;

Result<std::vector<uint8_t>> Handshake::start() {
  Impl& s = *impl_;
  if (s.state == Impl::State::kFailed) return s.failure;
  if (s.role != Role::kInitiator || s.state != Impl::State::kIdle)
    return s.fail(Internal("start() is for an initiator that has not started"));
  s.m1 = {};
  s.m1.header = make_header(wire::kHello, s.cipher_mask(), s.options.insecure ? wire::kFlagInsecure : 0);
  s.new_ephemeral(s.m1.nonce);
  std::memcpy(s.m1.ephemeral, s.eph_public.data(), 32);
  Bytes32 mac = s.mac1_of(s.m1);
  std::memcpy(s.m1.mac, mac.data(), 32);
  s.state = Impl::State::kSentHello;
  return to_bytes(s.m1);
}

Result<std::vector<uint8_t>> Handshake::on_message(std::span<const uint8_t> msg) {
  Impl& s = *impl_;
  switch (s.state) {
    case Impl::State::kFailed: return s.failure;
    case Impl::State::kDone: return s.fail(AuthFailed("unexpected message after the handshake completed"));
    case Impl::State::kIdle:
      if (s.role == Role::kResponder) return s.responder_hello(msg);
      return s.fail(Internal("on_message() before start() on an initiator"));
    case Impl::State::kSentHello: return s.initiator_reply(msg);
    case Impl::State::kSentReply: return s.responder_confirm(msg);
  }
  return s.fail(Internal("bad handshake state"));
}

size_t Handshake::next_message_bytes() const {
  switch (impl_->state) {
    case Impl::State::kIdle: return impl_->role == Role::kResponder ? kHelloBytes : 0;
    case Impl::State::kSentHello: return kReplyBytes;
    case Impl::State::kSentReply: return kConfirmBytes;
    default: return 0;
  }
}

bool Handshake::done() const { return impl_->state == Impl::State::kDone; }

std::vector<uint8_t> Handshake::take_reject() { return std::move(impl_->reject); }

Result<Session> Handshake::session() const {
  if (impl_->state == Impl::State::kFailed) return impl_->failure;
  if (impl_->state != Impl::State::kDone) return Internal("the handshake has not completed");
  return impl_->session;
}

}  // namespace lattice::crypto
