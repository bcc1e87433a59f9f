// Fuzz harness: the control plane's receive path. The input is the byte stream a peer sends on
// an insecure control connection (4-byte length, JSON; the sealed form differs only by the tag,
// which a fuzzer cannot forge): it goes through a socketpair into a real ControlChannel, whose
// try_recv() frames and parses it; every message it returns is checked against both schemas
// (what the coordinator accepts from a member, what a member accepts from the coordinator).
// Bad frames and messages must come back as errors; nothing may crash, hang or leak.
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "lattice/cluster/control.h"
#include "lattice/cluster/control_schema.h"

using namespace lattice;
using namespace lattice::cluster;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
  int buf = 8 << 20;  // the whole input fits in the socket: the writer never blocks
  ::setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  ::setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
  ControlChannel ch(sv[1], std::nullopt, 0, "fuzz peer");
  size_t off = 0;
  // Several writes, so frames also arrive split across reads.
  // Each round sends, delivers a message or ends: more rounds than bytes would be a hang.
  const size_t limit = 64 + size;
  size_t rounds = 0;
  while (rounds++ < limit) {
    if (off < size) {
      size_t n = std::min<size_t>(size - off, 1 + (size - off) / 2);
      ssize_t w = ::send(sv[0], data + off, n, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) off += static_cast<size_t>(w);
      if (off == size) ::shutdown(sv[0], SHUT_WR);
    } else if (size == 0 && rounds == 1) {
      ::shutdown(sv[0], SHUT_WR);
    }
    auto m = ch.try_recv();
    if (!m.ok()) break;  // EOF or a bad frame: sticky, as it should be
    if (!*m) continue;
    (void)validate_from_member(**m);
    (void)validate_from_coordinator(**m);
  }
  if (rounds > limit) std::abort();  // try_recv never made progress: a hang in the real reader
  ::close(sv[0]);
  return 0;
}
