// `lattice doctor [--hostfile F | --topology F] [-m model.gguf] [--json]`: setup checks of this
// node, or (under `lattice launch`) of every node and the cables between them; rank 0 prints
// the joined report (src/lattice/doctor/doctor.h, docs/DOCTOR.md). Exit 0: no failure;
// 1: some check failed (under launch: rank 0's exit code says it; the other ranks exit 0 once
// the report is built); 2: doctor itself could not run (bad flags, unreadable topology).
#include <cstdio>
#include <memory>

#include "command.h"
#include "lattice/cluster/rank_env.h"
#include "lattice/doctor/doctor.h"

namespace lattice::cli {
namespace {

struct DoctorArgs {
  doctor::Options o;
  bool json = false;
  int probe_timeout_ms = 1500;
  double timeout_s = 60;
};

int run_doctor(DoctorArgs& a) {
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "lattice doctor: %s\n", m.c_str());
    return 2;
  };
  if (a.probe_timeout_ms < 1 || a.probe_timeout_ms > 600000) return fail("--probe-timeout-ms must be 1..600000");
  if (!(a.timeout_s > 0) || a.timeout_s > 3600) return fail("--timeout-s must be in (0, 3600]");
  a.o.probe_timeout = std::chrono::milliseconds(a.probe_timeout_ms);
  auto env = cluster::RankEnv::from_env();
  if (!env.ok()) return fail(env.status().message());
  const bool launched = env->launched;
  auto report = launched ? doctor::run_launched(a.o, Deadline::after(std::chrono::duration<double>(a.timeout_s)))
                         : doctor::run_single(a.o);
  if (!report.ok()) return fail(report.status().to_string());
  // A rank that could not join the others reports alone (its own checks and why), whatever its rank.
  const bool alone = launched && report->world_size != env->world_size;
  if (!launched || env->rank == 0 || alone) {
    if (a.json) std::printf("%s\n", doctor::to_json(*report).dump(2).c_str());
    else std::printf("%s", doctor::render_text(*report).c_str());
    std::fflush(stdout);
  }
  // Under launch rank 0 alone carries the verdict: a failing rank exiting first would make
  // launch stop rank 0 before it printed the report.
  if (launched && env->rank != 0 && !alone) return 0;
  return report->count(doctor::Level::kFail) > 0 ? 1 : 0;
}

Registrar doctor_cmd{{"doctor", "check this node (or, under launch, the cluster) is set up: RDMA, cables, versions, model, memory",
                      [](CLI::App& app) {
                        auto a = std::make_shared<DoctorArgs>();
                        app.add_option("--hostfile,--topology", a->o.topology, "topology file (or MLX hostfile); under launch: LATTICE_TOPOLOGY");
                        app.add_option("-m,--model", a->o.model, "GGUF file: same on every node (header hash), memory against the plan");
                        app.add_option("--secret-file", a->o.secret_file, "cluster secret file to check (default LATTICE_SECRET_FILE)");
                        app.add_option("--host", a->o.host, "which topology host this is (default: found by address or name)");
                        app.add_flag("--emulated", a->o.emulated, "count the emulated verbs devices (verbs-emu) as this machine's");
                        app.add_option("--probe-timeout-ms", a->probe_timeout_ms, "bound on one cable probe")->capture_default_str();
                        app.add_option("--timeout-s", a->timeout_s, "bound on the whole run under launch")->capture_default_str();
                        app.add_flag("--json", a->json, "print the report as JSON");
                        return [a] { return run_doctor(*a); };
                      }}};

}  // namespace
}  // namespace lattice::cli
