// A cable as the simulator sees it: one-way latency, bandwidth, and the software cost of each
// message. Presets by medium (link.cc, sources cited there); a topology link picks one from its
// "medium" (or its provider), and its "gbps" / "latency_us" override the preset's figures.
#pragma once

#include <string>
#include <vector>

#include "lattice/cluster/topology.h"
#include "lattice/core/status.h"
#include "lattice/sim/machine.h"

namespace lattice::sim {

struct LinkModel {
  std::string medium;        // "tb5-rdma", "tb5-tcp", "10gbe", "100gbe", "shm", "loopback-tcp"
  std::string source;
  double latency_us = 0;     // one way, a small message
  double gbytes_s = 0;       // one direction of one cable, GB/s
  double per_message_us = 0; // sender's software cost per message (posting, syscalls)
  bool uses_tb5_port = false;  // occupies a Thunderbolt 5 port (and its controller) at each end
  // Staged framing (lattice's verbs provider, fabric/verbs/wire.h; 0: none, bytes go on the wire
  // as they are): a message goes out as whole slots of slot_bytes, each carrying up to
  // slot_payload bytes of it; the receiver answers with an ack slot after every ack_every slots
  // (the message's end rides on the next slot going back). The sender holds at most `window`
  // unacked slots; its send completes when its last slot is staged (at once for a message within
  // the window).
  double slot_bytes = 0, slot_payload = 0;
  int ack_every = 0, window = 0;

  bool staged() const { return slot_bytes > 0; }
  // Slots a message of `bytes` takes (staged framing; at least one, even for no payload).
  double slots(double bytes) const;
  // Bytes a message of `bytes` puts on the wire (its slots when staged).
  double wire_bytes(double bytes) const { return staged() ? slots(bytes) * slot_bytes : bytes; }
  // Time for one message of `bytes` on an idle cable, microseconds (to its arrival, not its ack).
  double message_us(double bytes) const { return per_message_us + latency_us + wire_bytes(bytes) / (gbytes_s * 1e3); }
};

// `m` with the staged framing of lattice's verbs provider (the constants of fabric/verbs/wire.h).
LinkModel with_verbs_staging(LinkModel m);

Result<LinkModel> link_preset(const std::string& medium);
std::vector<std::string> link_preset_names();
// The model of a topology link between hosts running machines a and b: its medium, else by
// provider (verbs: tb5-rdma; tcp: the measured loopback figures when both machines carry them,
// else 10gbe; shm: measured, else the shm preset), then the link's gbps / latency_us.
Result<LinkModel> link_for(const cluster::Link& link, const Machine& a, const Machine& b);

}  // namespace lattice::sim
