// The `lattice topo` and `lattice keygen` commands as processes: exit codes, messages,
// file modes. Skipped when the lattice binary has not been built next to the tests.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

namespace fs = std::filesystem;

struct CmdResult {
  int code = -1;
  std::string out;  // stdout and stderr together
};

std::string lattice_bin() { return std::string(LATTICE_BINARY_DIR) + "/lattice"; }

CmdResult run(const std::string& args) {
  CmdResult r;
  std::string cmd = lattice_bin() + " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int st = ::pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

class CliProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(lattice_bin())) GTEST_SKIP() << "build the lattice target first";
    dir_ = fs::temp_directory_path() / ("lattice-cli-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string write(const char* name, const std::string& text) {
    std::string p = (dir_ / name).string();
    std::ofstream(p) << text;
    return p;
  }
  fs::path dir_;
};

// --log takes a level spdlog knows; anything else is a usage error, not a silent "off".
TEST_F(CliProcessTest, UnknownLogLevelIsAUsageError) {
  CmdResult bad = run("--log bogus providers");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("bogus"), std::string::npos) << bad.out;
  CmdResult ok = run("--log debug providers");
  EXPECT_EQ(ok.code, 0) << ok.out;
}

// ping takes --secret-file (the flag the missing-secret message names) and refuses a bad one.
TEST_F(CliProcessTest, PingTakesTheSecretFileFlagTheMessageNames) {
  CmdResult help = run("ping --help");
  EXPECT_NE(help.out.find("--secret-file"), std::string::npos) << help.out;
  CmdResult missing = run("ping --secret-file " + (dir_ / "absent").string());
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_NE(missing.out.find("absent"), std::string::npos) << missing.out;
  const std::string file = (dir_ / "secret").string();
  ASSERT_EQ(run("keygen -o " + file).code, 0);
  CmdResult single = run("ping --secret-file " + file + " --iters 10 --bw-seconds 0.01");
  EXPECT_EQ(single.code, 0) << single.out;
}

TEST_F(CliProcessTest, TopoExitCodes) {
  std::string examples = std::string(LATTICE_SOURCE_DIR) + "/examples/topologies/";
  CmdResult ok = run("topo " + examples + "tb-ring-4.json");
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_NE(ok.out.find("shape: ring"), std::string::npos) << ok.out;
  CmdResult dot = run("topo --dot " + examples + "mesh-3-dual.json");
  EXPECT_EQ(dot.code, 0);
  EXPECT_EQ(dot.out.rfind("graph \"lattice\"", 0), 0u) << dot.out;

  std::string bad = write("bad.json", "{\n  \"version\": 1,\n  \"hosts\": [\n    {\"name\": \"a\", \"adress\": \"x\"}\n  ]\n}\n");
  CmdResult b = run("topo " + bad);
  EXPECT_EQ(b.code, 2);
  EXPECT_NE(b.out.find(bad + ":4: unknown key 'adress'"), std::string::npos) << b.out;

  std::string split = write("split.json", R"({"version": 1, "hosts": [{"name": "a", "address": "x"},
      {"name": "b", "address": "y"}], "links": []})");
  CmdResult s = run("topo " + split);
  EXPECT_EQ(s.code, 2);
  EXPECT_NE(s.out.find("disconnected"), std::string::npos) << s.out;

  EXPECT_EQ(run("topo " + (dir_ / "missing.json").string()).code, 2);
}

TEST_F(CliProcessTest, KeygenWritesMode0600AndRefusesToOverwrite) {
  std::string key = (dir_ / "cluster.key").string();
  CmdResult first = run("keygen -o " + key);
  ASSERT_EQ(first.code, 0) << first.out;
  struct stat st {};
  ASSERT_EQ(::stat(key.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  std::string hex;
  std::ifstream(key) >> hex;
  EXPECT_EQ(hex.size(), 64u);
  EXPECT_EQ(hex.find_first_not_of("0123456789abcdef"), std::string::npos);

  CmdResult again = run("keygen -o " + key);
  EXPECT_NE(again.code, 0);
  EXPECT_NE(again.out.find("--force"), std::string::npos) << again.out;
  std::string same;
  std::ifstream(key) >> same;
  EXPECT_EQ(same, hex);

  CmdResult forced = run("keygen --force -o " + key);
  EXPECT_EQ(forced.code, 0) << forced.out;
  std::string fresh;
  std::ifstream(key) >> fresh;
  EXPECT_NE(fresh, hex);

  CmdResult out = run("keygen");
  EXPECT_EQ(out.code, 0);
  EXPECT_EQ(out.out.size(), 65u) << out.out;  // 64 hex digits and a newline
}

}  // namespace
