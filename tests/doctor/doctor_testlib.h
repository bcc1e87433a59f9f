// Fixtures of the doctor tests: a scratch directory, a tiny make-model GGUF, a local topology
// of hosts on 127.0.0.x (Linux answers for all of 127/8 on lo) with a tcp cable per pair.
#pragma once

#include <string>
#include <vector>

#include "lattice/doctor/doctor.h"

namespace lattice::doctor::testing {

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag);
  ~ScratchDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A tiny model (seed: the weights; layers: the tensor table). False if it could not be written.
bool write_model(const std::string& path, int layers = 4, uint64_t seed = 1);
// Hosts h0..h{n-1} at 127.0.0.{i+1}:port, a tcp cable per pair. `verbs` (n = 3): the cables
// are verbs links on the emulated devices (each host's two cables on emu_tb5_0 and emu_rc_0),
// their paired interfaces the hosts' loopback addresses.
void write_local_topology(const std::string& path, int n, int port, bool verbs = false);
// Every failing check, as "rank:id" (rank -1: the cluster section).
std::vector<std::string> failures(const Report& r);

}  // namespace lattice::doctor::testing
