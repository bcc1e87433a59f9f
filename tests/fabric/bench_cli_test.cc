// Smoke tests of the CLI's fabric commands: `lattice bench fabric` and `lattice demo`, run as
// real processes (the built binary at LATTICE_BINARY_DIR/lattice). They check behaviour
// (exit codes, JSON fields, matrix shape, payload checks), never speed.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

struct CliRun {
  int exit_code = -1;
  std::string out;
};

// Runs `lattice ARGS` with a generous liveness bound (a loaded 2-core machine); stderr is
// folded into the captured output only when `with_stderr`.
CliRun run_lattice(const std::string& args, bool with_stderr = false) {
  const std::string cmd =
      "timeout -k 5 180 " + std::string(LATTICE_BINARY_DIR) + "/lattice " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  CliRun r;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) r.out.append(buf, n);
  int st = ::pclose(f);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

bool provider_available(const std::string& name) {
  CliRun r = run_lattice("providers");
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);)
    if (line == name) return true;
  return false;
}

std::vector<nlohmann::json> json_lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) v.push_back(j);
  }
  return v;
}

// The JSON row rank 0 of a `bench coll --procs ... --json` job printed ("[rank 0] {...}");
// discarded when there is none.
nlohmann::json rank0_row(const std::string& out) {
  const size_t at = out.find("[rank 0] {");
  if (at == std::string::npos) return nlohmann::json::value_t::discarded;
  return nlohmann::json::parse(out.substr(at + 9, out.find('\n', at) - at - 9), nullptr, false);
}

// shm and tcp are built into every lattice binary: one missing from `lattice providers` is a
// failure, never a skip.
#define REQUIRE_PROVIDER(name) \
  ASSERT_TRUE(provider_available(name)) << "fabric provider '" << name << "' missing from `lattice providers`"

TEST(BenchCliProcess, BadFlagsExitTwoWithAMessage) {
  for (const char* args : {"bench fabric --op nope", "bench fabric --no-such-flag", "bench fabric --min 1K --max 8",
                           "bench fabric --window 0", "bench fabric --min 12Q", "bench fabric --peer h:1 --listen 5",
                           "bench fabric --min 1.5", "bench fabric --max 4T", "demo -n 1", "demo --size 0",
                           "demo --size 1.5"}) {
    CliRun r = run_lattice(args, /*with_stderr=*/true);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.out;
    EXPECT_FALSE(r.out.empty()) << args << ": no error message";
  }
}

// Across hosts the two sides authenticate with the cluster secret: without one the message
// names the flag, and the flag exists.
TEST(BenchCliProcess, TwoHostModeWithoutASecretNamesTheFlagItHas) {
  CliRun r = run_lattice("bench fabric --peer 127.0.0.1:9 --min 8 --max 8", true);
  // run_lattice's environment may hold a secret (CI): only check when it does not.
  if (std::getenv("LATTICE_SECRET") == nullptr && std::getenv("LATTICE_SECRET_FILE") == nullptr) {
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find("--secret-file"), std::string::npos) << r.out;
  }
  CliRun missing = run_lattice("bench fabric --peer 127.0.0.1:9 --secret-file /nonexistent/lattice.secret", true);
  EXPECT_EQ(missing.exit_code, 2) << missing.out;
  EXPECT_NE(missing.out.find("/nonexistent/lattice.secret"), std::string::npos) << missing.out;
  CliRun help = run_lattice("bench fabric --help");
  EXPECT_NE(help.out.find("--secret-file"), std::string::npos) << help.out;
}

// `--listen` meets its peer through the cluster's control plane, authenticated with the cluster
// secret: a stranger holding another secret is refused at once, a silent one holds no slot,
// and the real peer still gets through while the silent one keeps its socket open.
TEST(BenchCliProcess, ListenRefusesStrangersAtOnceAndServesThePeer) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("lattice-listen-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string bin = std::string(LATTICE_BINARY_DIR) + "/lattice";
  ASSERT_EQ(run_lattice("keygen -o " + (dir / "good").string()).exit_code, 0);
  ASSERT_EQ(run_lattice("keygen -o " + (dir / "bad").string()).exit_code, 0);
  const int port = 20000 + static_cast<int>(::getpid() % 20000);
  const std::string common = " bench fabric --provider tcp --min 8 --max 8 --iters 20 --warmup 2 --measure lat --json";
  // The listener, in the background (its output in files).
  const std::string listen_cmd = "LATTICE_SECRET= LATTICE_SECRET_FILE=" + (dir / "good").string() + " timeout -k 5 120 " +
                                 bin + common + " --listen " + std::to_string(port) + " --timeout 100 >" +
                                 (dir / "listen.out").string() + " 2>" + (dir / "listen.err").string() + " & echo $! >" +
                                 (dir / "listen.pid").string();
  ASSERT_EQ(std::system(("sh -c '" + listen_cmd + "'").c_str()), 0);
  auto read_file = [](const fs::path& p) {
    std::ifstream f(p);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  for (int i = 0; i < 400 && read_file(dir / "listen.err").find("waiting") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  ASSERT_NE(read_file(dir / "listen.err").find("waiting for a peer"), std::string::npos) << read_file(dir / "listen.err");
  // A silent stranger: connects and says nothing, for the whole test.
  int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(silent, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  auto peer = [&](const char* secret) {
    const std::string cmd = "LATTICE_SECRET= LATTICE_SECRET_FILE=" + (dir / secret).string() + " timeout -k 5 120 " + bin +
                            common + " --peer 127.0.0.1:" + std::to_string(port) + " --timeout 60 2>&1";
    CliRun r;
    FILE* f = ::popen(cmd.c_str(), "r");
    char buf[4096];
    for (size_t n; f && (n = std::fread(buf, 1, sizeof buf, f)) > 0;) r.out.append(buf, n);
    int st = f ? ::pclose(f) : -1;
    r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
  };
  auto t0 = std::chrono::steady_clock::now();
  CliRun stranger = peer("bad");
  const auto refused_after = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(stranger.exit_code, 1) << stranger.out;
  EXPECT_NE(stranger.out.find("secret"), std::string::npos) << stranger.out;
  // At once: the join's setup deadline is 20 s; a refusal by timeout would take that long.
  EXPECT_LT(refused_after, std::chrono::seconds(15)) << stranger.out;
  CliRun real = peer("good");
  EXPECT_EQ(real.exit_code, 0) << real.out << "\nlistener:\n" << read_file(dir / "listen.err");
  EXPECT_EQ(json_lines(real.out).size(), 1u) << real.out;
  ::close(silent);
  const std::string pid = read_file(dir / "listen.pid");
  // The listener ends by itself once its peer is done (kill is only the test's own bound).
  for (int i = 0; i < 400 && ::kill(std::stoi(pid), 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  EXPECT_NE(::kill(std::stoi(pid), 0), 0) << "listener still running:\n" << read_file(dir / "listen.err");
  if (::kill(std::stoi(pid), 0) == 0) ::kill(std::stoi(pid), SIGKILL);
  EXPECT_NE(read_file(dir / "listen.err").find("refused"), std::string::npos) << read_file(dir / "listen.err");
  fs::remove_all(dir);
}

TEST(BenchCliProcess, UnknownProviderFailsCleanly) {
  CliRun r = run_lattice("bench fabric --provider nosuch:// --min 8 --max 8", true);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("nosuch"), std::string::npos) << r.out;
}

void check_sweep(const std::string& provider_uri, const std::string& provider_name, const std::string& op,
                 const std::vector<size_t>& sizes, const std::string& extra) {
  CliRun r = run_lattice("bench fabric --provider " + provider_uri + " --op " + op + " --min " +
                      std::to_string(sizes.front()) + " --max " + std::to_string(sizes.back()) +
                      " --iters 200 --warmup 20 --bw-time 0.02 --json " + extra);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), sizes.size()) << r.out;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& j = rows[i];
    SCOPED_TRACE(j.dump());
    EXPECT_EQ(j.at("provider"), provider_name);
    EXPECT_EQ(j.at("op"), op);
    EXPECT_EQ(j.at("bytes").get<size_t>(), sizes[i]);
    // 200 iterations, scaled down above 64 KiB (200 * 64 KiB / bytes, at least 20).
    const int want_iters = sizes[i] <= 65536 ? 200 : std::max<int>(20, static_cast<int>(200 * 65536 / sizes[i]));
    EXPECT_EQ(j.at("iters").get<int>(), want_iters);
    const double mn = j.at("lat_us_min").get<double>(), med = j.at("lat_us_median").get<double>();
    EXPECT_GT(mn, 0.0);
    EXPECT_LE(mn, med);
    EXPECT_LE(med, j.at("lat_us_p99").get<double>());
    EXPECT_LT(med, 1e6);  // under a second one way: sane, not a speed assertion
    const double bw = j.at("bw_gbps").get<double>();
    EXPECT_GT(bw, 0.0);
    EXPECT_LT(bw, 1000.0);
    EXPECT_EQ(j.at("check_errors").get<uint64_t>(), 0u);
  }
}

// `lattice devices` end to end: the emulated devices with their ports and GIDs, and
// --no-emulated hides them. Whether the machine has real RDMA only changes the first lines.
TEST(DevicesProcess, ListsEmulatedDevicesAndHidesThemOnRequest) {
  if (!std::filesystem::exists(std::string(LATTICE_BINARY_DIR) + "/lattice"))
    GTEST_SKIP() << "the lattice binary is not built";
  CliRun all = run_lattice("devices");
  ASSERT_EQ(all.exit_code, 0) << all.out;
  EXPECT_NE(all.out.find("emu_tb5_0 (emulated)  fw emulated-1  ports 2  max QPs 10  max MRs 100"), std::string::npos)
      << all.out;
  EXPECT_NE(all.out.find("  port 1: DOWN   mtu 4096  max msg 16773120  link ethernet"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("  port 2: ACTIVE mtu 4096"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("(IPv4-mapped)"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("emu_rc_0 (emulated)"), std::string::npos) << all.out;
  EXPECT_TRUE(all.out.find("no RDMA") != std::string::npos || all.out.find("fw ") < all.out.find("emu_tb5_0"))
      << "neither system devices nor a 'no RDMA' line: " << all.out;

  CliRun system = run_lattice("devices --no-emulated");
  ASSERT_EQ(system.exit_code, 0) << system.out;
  EXPECT_EQ(system.out.find("emulated)"), std::string::npos) << system.out;

  CliRun bad = run_lattice("devices --bogus", /*with_stderr=*/true);
  EXPECT_NE(bad.exit_code, 0) << bad.out;
}

TEST(BenchCliProcess, ShmSendSweepJson) {
  REQUIRE_PROVIDER("shm");
  check_sweep("shm", "shm", "send", {8, 16, 32, 64}, "");
}

TEST(BenchCliProcess, ShmWriteAndReadWithPayloadCheck) {
  REQUIRE_PROVIDER("shm");
  check_sweep("shm", "shm", "write", {8, 64, 512, 4096}, "-f 8 --check");
  check_sweep("shm", "shm", "read", {8, 64, 512, 4096}, "-f 8 --check");
  check_sweep("shm", "shm", "send", {1, 64, 4096, 262144}, "-f 64 --check --window 4");
}

TEST(BenchCliProcess, TcpSendSweepJson) {
  REQUIRE_PROVIDER("tcp");
  // 32 KiB in a window of 32 once stalled the provider (an endpoint refused every post after
  // 65,536 sends in its life, 4ee95be): the size is back in the sweep.
  check_sweep("tcp://127.0.0.1:0", "tcp", "send", {8, 512, 32768}, "-f 64 --check");
  check_sweep("tcp://127.0.0.1:0", "tcp", "send", {4096, 8192, 16384, 32768, 65536}, "-f 2 --check");
  check_sweep("tcp://127.0.0.1:0", "tcp", "send", {1u << 20}, "--check --window 4");
}

// "tcp" means what it means in `run --provider tcp` and `demo --provider tcp`: this host, a
// port the system picks.
TEST(BenchCliProcess, PlainTcpIsThisHostAnyPort) {
  REQUIRE_PROVIDER("tcp");
  check_sweep("tcp", "tcp", "send", {8, 64}, "-f 8");
}

// Sizes read by the one parser (core/size.h): fractions of a unit, either case, B suffixes.
TEST(BenchCliProcess, SizesAreReadAsEverywhere) {
  REQUIRE_PROVIDER("shm");
  CliRun r = run_lattice("bench fabric --provider shm --min 1.5K --max 3KB --iters 50 --bw-time 0.01 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  EXPECT_EQ(rows[0].at("bytes").get<size_t>(), 1536u);
  EXPECT_EQ(rows[1].at("bytes").get<size_t>(), 3072u);
}

TEST(BenchCliProcess, TableOutputHasHeaderAndOneRowPerSize) {
  REQUIRE_PROVIDER("shm");
  CliRun r = run_lattice("bench fabric --provider shm --min 8 --max 32 --iters 100 --bw-time 0.02");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("lat_median"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("GB/s = 1e9 bytes/s"), std::string::npos) << r.out;
  int rows = 0;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    auto first = line.find_first_not_of(' ');
    if (first != std::string::npos && line[first] != '#') ++rows;
  }
  EXPECT_EQ(rows, 3) << r.out;
}

// The demo: N x N matrices with every off-diagonal pair measured.
void check_demo(const std::string& provider) {
  CliRun r = run_lattice("demo -n 3 --provider " + provider + " --iters 200 --bw-time 0.02 --size 1M --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto rows = json_lines(r.out);
  ASSERT_EQ(rows.size(), 1u) << r.out;
  const auto& j = rows[0];
  EXPECT_EQ(j.at("provider"), provider);
  EXPECT_EQ(j.at("ranks"), 3);
  for (const char* key : {"lat_us_median", "bw_gbps"}) {
    const auto& m = j.at(key);
    ASSERT_EQ(m.size(), 3u) << key;
    for (size_t a = 0; a < 3; ++a) {
      ASSERT_EQ(m[a].size(), 3u) << key;
      for (size_t b = 0; b < 3; ++b) {
        if (a == b) continue;
        EXPECT_GT(m[a][b].get<double>(), 0.0) << key << " " << a << "," << b;
        EXPECT_EQ(m[a][b].get<double>(), m[b][a].get<double>()) << key << ": a pair has one figure";
      }
    }
  }
}

TEST(DemoProcess, ShmThreeRanksJson) {
  REQUIRE_PROVIDER("shm");
  check_demo("shm");
}

TEST(DemoProcess, TcpThreeRanksJson) {
  REQUIRE_PROVIDER("tcp");
  check_demo("tcp");
}

TEST(DemoProcess, ShmThreeRanksPrintsMatrices) {
  REQUIRE_PROVIDER("shm");
  CliRun r = run_lattice("demo -n 3 --iters 200 --bw-time 0.02 --size 64K");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("provider shm"), std::string::npos) << r.out;
  // Two matrices, each a header naming rank0..rank2 and three rows.
  int headers = 0, rows = 0;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::vector<std::string> words;
    for (std::string s; w >> s;) words.push_back(s);
    if (words == std::vector<std::string>{"rank0", "rank1", "rank2"}) ++headers;
    if (words.size() == 4 && words[0].rfind("rank", 0) == 0) {
      ++rows;
      int dashes = 0;
      for (size_t k = 1; k < 4; ++k) dashes += words[k] == "-";
      EXPECT_EQ(dashes, 1) << line;
    }
  }
  EXPECT_EQ(headers, 2) << r.out;
  EXPECT_EQ(rows, 6) << r.out;
}

// bench coll end to end, as threads and as processes (--procs goes through lattice launch):
// one JSON row per size, every result checked against the scalar reference (wrong == 0).
void check_coll(const std::string& args, const std::string& op, const std::vector<size_t>& sizes) {
  CliRun r = run_lattice("bench coll -n 2 --op " + op + " --min " + std::to_string(sizes.front()) + " --max " +
                         std::to_string(sizes.back()) + " --iters 20 --check --json " + args);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::vector<nlohmann::json> rows;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("[rank ", 0) == 0 && line.rfind("[rank 0]", 0) != 0) continue;  // one rank's rows
    const size_t brace = line.find('{');
    if (brace == std::string::npos) continue;
    auto j = nlohmann::json::parse(line.substr(brace), nullptr, false);
    if (!j.is_discarded()) rows.push_back(j);
  }
  ASSERT_EQ(rows.size(), sizes.size()) << r.out;
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(rows[i].dump());
    EXPECT_EQ(rows[i].at("op"), op);
    EXPECT_EQ(rows[i].at("bytes").get<size_t>(), sizes[i]);
    EXPECT_EQ(rows[i].at("ranks").get<int>(), 2);
    EXPECT_EQ(rows[i].at("wrong").get<int>(), 0);
    EXPECT_GT(rows[i].at("time_us_min").get<double>(), 0.0);
    EXPECT_LE(rows[i].at("time_us_min").get<double>(), rows[i].at("time_us_median").get<double>());
    // The calls' throughput; no bound against the per-iteration figures: ranks taking turns
    // being slow can give a wall clock a call below every iteration's slowest rank.
    EXPECT_GT(rows[i].at("time_us_per_call_wall").get<double>(), 0.0);
  }
}

TEST(BenchCliProcess, BenchCollChecksEveryResultOverThreadsAndProcesses) {
  check_coll("--provider shm", "all_reduce", {1024, 2048, 4096});
  check_coll("--provider shm", "reduce_scatter", {4096});
  check_coll("--provider tcp --procs", "all_gather", {1024, 2048});
  CliRun bad = run_lattice("bench coll --op nope", true);
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
}

// --work: each rank runs decode's kernel before every call; the row then also carries the
// kernel's time alone and in lockstep and the step's (kernel + call), which holds the kernel.
TEST(BenchCliProcess, BenchCollWorkTimesTheKernelBetweenCalls) {
  CliRun r = run_lattice("bench coll -n 2 --procs --provider shm -b 8K -e 8K --iters 40 --work 1M --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = rank0_row(r.out);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_GT(j.at("work_bytes").get<double>(), 0.9e6);
  EXPECT_GT(j.at("solo_us_mean").get<double>(), 0.0);
  EXPECT_GT(j.at("work_us_mean").get<double>(), 0.0);
  EXPECT_GT(j.at("step_us_mean").get<double>(), j.at("work_us_mean").get<double>());
  // The steps' pace: the slowest rank's wall clock over them, which holds its kernels.
  EXPECT_GT(j.at("lockstep_wall_us_per_step").get<double>(), j.at("work_us_mean").get<double>());
  EXPECT_EQ(j.at("iters").get<int>(), 40);
  CliRun bad = run_lattice("bench coll -n 2 --work 100", true);
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--work: at least 4K"), std::string::npos) << bad.out;
  CliRun junk = run_lattice("bench coll -n 2 --work lots", true);
  EXPECT_EQ(junk.exit_code, 2) << junk.out;
  EXPECT_NE(junk.out.find("--work"), std::string::npos) << junk.out;
}

// --work-tokens: the kernel multiplies that many tokens at once, prefill's matmul: over the
// same weight, 32 tokens take several times one token's matvec (about 10x here; 2x asked).
TEST(BenchCliProcess, BenchCollWorkTokensRunsPrefillsMatmul) {
  const std::string cmd = "bench coll -n 2 --procs --provider shm -b 8K -e 8K --iters 16 --work 1M --json";
  CliRun one = run_lattice(cmd);
  CliRun many = run_lattice(cmd + " --work-tokens 32");
  ASSERT_EQ(one.exit_code, 0) << one.out;
  ASSERT_EQ(many.exit_code, 0) << many.out;
  auto j1 = rank0_row(one.out), j32 = rank0_row(many.out);
  ASSERT_FALSE(j1.is_discarded() || j32.is_discarded()) << one.out << many.out;
  EXPECT_EQ(j1.at("work_tokens"), 1);
  EXPECT_EQ(j32.at("work_tokens"), 32);
  EXPECT_GT(j32.at("solo_us_mean").get<double>(), 2 * j1.at("solo_us_mean").get<double>()) << many.out;
  CliRun bad = run_lattice("bench coll -n 2 --work 1M --work-tokens 0", true);
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--work-tokens: 1 to 4096"), std::string::npos) << bad.out;
  CliRun alone = run_lattice("bench coll -n 2 --work-tokens 8", true);
  EXPECT_EQ(alone.exit_code, 2) << alone.out;
  EXPECT_NE(alone.out.find("only with --work"), std::string::npos) << alone.out;
}

// --op chain: a pipeline's decode step, the buffer through the ranks with the kernel at each in
// turn and the last rank's token broadcast, so a step holds every rank's kernel one after the
// other: its pace is more than one rank's kernel. Not a collective --check knows.
TEST(BenchCliProcess, BenchCollChainRunsAPipelinesStep) {
  CliRun r = run_lattice("bench coll -n 3 --procs --provider shm --op chain -b 8K -e 8K --iters 16 --work 1M --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = rank0_row(r.out);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j.at("op"), "chain");
  EXPECT_EQ(j.at("ranks"), 3);
  EXPECT_GT(j.at("work_us_mean").get<double>(), 0.0);
  EXPECT_GT(j.at("lockstep_wall_us_per_step").get<double>(), j.at("work_us_mean").get<double>());
  CliRun checked = run_lattice("bench coll -n 2 --op chain --check", true);
  EXPECT_EQ(checked.exit_code, 2) << checked.out;
  EXPECT_NE(checked.out.find("not --op chain"), std::string::npos) << checked.out;
  CliRun bad = run_lattice("bench coll -n 2 --op chains", true);
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("(or chain)"), std::string::npos) << bad.out;
}

// Rank processes run the emulated links too; threads in one process cannot, and say so.
TEST(BenchCliProcess, BenchCollRunsEmulatedLinksAsProcessesOnly) {
  check_coll("--provider 'tcp?latency_us=20' --procs", "all_reduce", {8192});
  CliRun threads = run_lattice("bench coll -n 2 --provider 'tcp?latency_us=20'", true);
  EXPECT_EQ(threads.exit_code, 2) << threads.out;
  EXPECT_NE(threads.out.find("emulated links need --procs"), std::string::npos) << threads.out;
  CliRun unknown = run_lattice("bench coll -n 2 --procs --provider ucx", true);
  EXPECT_EQ(unknown.exit_code, 2) << unknown.out;
  EXPECT_NE(unknown.out.find("--provider must be shm or tcp"), std::string::npos) << unknown.out;
}


}  // namespace
