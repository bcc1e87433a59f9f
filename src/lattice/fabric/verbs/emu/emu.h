// An emulated RDMA device behind the verbs function table (api.h), so the verbs provider is
// proven on a machine without RDMA. Queue pairs of two processes (or two threads) talk over
// a shared-memory segment per QP: the QP's memfd, which the peer opens through
// /proc/<pid>/fd/<qpn> (the QPN is the fd number, the pid is in the low 24 bits of every
// GID). Nothing else crosses: the peer is found from (GID, QPN) exactly as real verbs does.
//
// Profiles (enforced limits, ../shared/ANCHORS.md):
//   apple-tb5: UC QPs only (creating RC fails), at most 10 QPs and 100 MRs per opened device,
//     4 KB frames (a send and its receive must span the same number of frames, else both
//     complete in error), max message 16,773,120 bytes, at most 4,095 WRs, receives posted
//     only once the QP is in RTS, a send waits until the peer posted a receive, send
//     completions fire when the frames leave (before delivery: no hardware acks), GID index 0
//     MAC-derived, 1 ::ffff:IPv4, 2 link-local, port 1 DOWN and port 2 ACTIVE, and moving a QP
//     to ERR wedges the port (the provider must never do it).
//   linux-rc: RC and UC QPs, one active port (1), 16 MiB max message, a send larger than the
//     posted receive fails both sides; a send to a destroyed QP fails (RC retries exhausted).
//
// Progress: the emulator moves data only inside ibv_post_send/ibv_poll_cq calls of the
// process that owns the QP (no threads of its own): a sender publishes frames into the peer
// segment when credit and ring space allow; a receiver drains its segment into posted
// receives when its CQ is polled. wait_cq (api.h) sleeps on a futex doorbell in the QP's own
// segment, which the peer rings when it publishes a message there, and when it posts a receive
// or consumes a message that this QP's sends were waiting for (no credit, or no ring space);
// a timed link's next message wakes it when due. So an idle progress thread costs no CPU, as
// on a NIC with a completion channel.
//
// Fault injection (per opened device, frames counted from 1 over every send of the device):
//   drop=N       the message holding frame N is lost (it consumes no receive)
//   dup=N        the message holding frame N is delivered twice
//   corrupt=N    one byte of frame N is flipped on the wire
//   delay=N:Dms  the message holding frame N is held back D (later ones queue behind it)
//   tamper=N     one byte of frame N is flipped and the lattice chunk checksum (wire.h) fixed
//                up to match: an attacker on the wire, not line noise (only a tag notices)
//   replay=N     the message holding frame N is delivered again after the next message
//   reorder=N    the message holding frame N is delivered after the next message, not before
//   kill_port_after=N  the port goes DOWN once N frames were sent: later sends fail with
//                IBV_WC_RETRY_EXC_ERR and nothing more is received
//   no_ipv4=1    GID index 1 is empty (the interface has no IPv4 address)
//
// Link timing (a cable this machine does not have, for the simulator's checks; docs/SIM.md):
//   latency_us=L  every message (and RC response) is delivered L microseconds after it went on
//                 the wire: the receiver's poll does not see it sooner. L is the one-way time
//                 from post to delivery, not an addition to the emulator's own few microseconds.
//   gbytes_s=R    each QP's wire carries R GB/s (1e9 bytes/s) one way: a message of B bytes
//                 takes B/R on it, after the messages before it (a queue as deep as the ring).
//   Send completions still fire once the frames are in the peer's ring (before delivery, as
//   apple-tb5's do). Unset (0): no timing, the data path is as without it.
//
// Machine faults (the whole emulated machine, every process that reads the variable, for
// `lattice doctor` and its tests): LATTICE_VERBS_EMU_FAULT=no-device,port-down,no-gid1,no-pd
// (any of them, comma-separated):
//   no-device  ibv_get_device_list lists no emulated device (RDMA not enabled, no NIC)
//   port-down  every port of every emulated device is DOWN (an unplugged cable)
//   no-gid1    GID index 1 is empty on every device (no IPv4 on the paired interface)
//   no-pd      ibv_alloc_pd returns NULL with EPERM (the device opens, but this process may
//              not use it: the "null protection domain" of a Mac whose RDMA is not enabled)
// Read at each device-list, port and GID query: they change what the queries report (what a
// provider opening the device, or doctor, sees), not the data path of QPs already created. An
// unknown word is logged and ignored (use machine_faults_from_env() to refuse it).
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <string_view>

#include "lattice/core/status.h"
#include "lattice/fabric/verbs/api.h"

namespace lattice::fabric::verbs::emu {

struct Faults {
  uint64_t drop_frame = 0;  // 0: off
  uint64_t dup_frame = 0;
  uint64_t corrupt_frame = 0;
  uint64_t delay_frame = 0;
  uint64_t tamper_frame = 0;
  uint64_t replay_frame = 0;
  uint64_t reorder_frame = 0;
  std::chrono::milliseconds delay{0};
  uint64_t kill_port_after = 0;
  bool no_ipv4 = false;
  double latency_us = 0;  // link timing (see the top); 0: none
  double gbytes_s = 0;
};

// Parses "drop=17&corrupt=40&dup=9&tamper=9&replay=9&reorder=9&delay=5:10ms&kill_port_after=N&no_ipv4=1
// &latency_us=50&gbytes_s=1". Unknown keys
// and malformed values are kInvalidArgument.
Result<Faults> parse_faults(std::string_view query);

struct MachineFaults {
  bool no_device = false;
  bool port_down = false;
  bool no_gid1 = false;
  bool no_pd = false;
};
inline constexpr const char* kMachineFaultEnv = "LATTICE_VERBS_EMU_FAULT";
// Parses "no-device,port-down,no-gid1,no-pd" (empty: none); an unknown word is kInvalidArgument.
Result<MachineFaults> parse_machine_faults(std::string_view words);
// LATTICE_VERBS_EMU_FAULT parsed (unset: none).
Result<MachineFaults> machine_faults_from_env();

// What the emulator did to one opened device (for tests).
struct Stats {
  uint64_t frames_sent = 0;
  uint64_t dropped = 0, duplicated = 0, corrupted = 0, delayed = 0, tampered = 0, replayed = 0, reordered = 0;
  bool port_killed = false;
  bool wedged = false;  // a QP was moved to ERR (apple-tb5)
};

// The emulator's function table. Devices: "emu_tb5_0" (apple-tb5), "emu_rc_0" (linux-rc).
const VerbsApi& api();
// Device name of a profile ("apple-tb5" -> "emu_tb5_0"); empty if unknown.
std::string_view device_for_profile(std::string_view profile);
// Emulator-only: set the faults of an opened device (before creating QPs).
void set_faults(ibv_context* ctx, const Faults& faults);
Stats stats(ibv_context* ctx);

}  // namespace lattice::fabric::verbs::emu
