#include "serve_testlib.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "lattice/engine/gguf/make_model.h"

namespace lattice::serve::testing {

namespace fs = std::filesystem;

TinyModel::TinyModel(bool big) {
  static int n = 0;
  dir_ = (fs::temp_directory_path() / ("lattice-serve-" + std::to_string(::getpid()) + "-" + std::to_string(n++))).string();
  fs::create_directories(dir_);
  path_ = dir_ + "/tiny.gguf";
  engine::MakeModelOptions o;
  o.dim = big ? 256 : 64;
  o.layers = big ? 4 : 2;
  o.heads = 4;
  o.kv_heads = 2;
  o.vocab = 300;
  o.context_length = 8192;
  o.type = "q8_0";
  o.threads = 1;
  ok_ = engine::make_model(o, path_).ok();
}

TinyModel::~TinyModel() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

Status ServeProc::start(const std::string& model, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {cluster::testing::lattice_bin(), "serve", "-m", model, "--port", "0"};
  argv.insert(argv.end(), args.begin(), args.end());
  LATTICE_ASSIGN_OR_RETURN(proc_, cluster::testing::Proc::spawn(argv, {}));
  running_ = true;
  auto line = proc_.wait_line("listening on http://", Deadline::after(std::chrono::seconds(30)));
  if (!line.ok()) return Internal("serve did not start: " + line.status().to_string() + "; stderr: " + proc_.err());
  const auto colon = line->rfind(':');
  port_ = std::atoi(line->c_str() + colon + 1);
  if (port_ <= 0) return Internal("no port in '" + *line + "'");
  return Status::Ok();
}

Result<int> ServeProc::stop() {
  if (!running_) return InvalidArgument("not running");
  running_ = false;
  proc_.signal(SIGTERM);
  return proc_.wait(Deadline::after(std::chrono::seconds(20)));
}

ServeProc::~ServeProc() {
  if (running_) (void)stop();
}

bool have_curl() { return std::system("curl --version >/dev/null 2>&1") == 0; }

HttpResult curl(const std::string& url, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"curl", "-s", "--max-time", "30", "-o", "-", "-w", "\n%{http_code}"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(url);
  // curl keeps the last --max-time; the process gets 10 s beyond it.
  int max_time = 30;
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == "--max-time") max_time = std::max(1, std::atoi(argv[i + 1].c_str()));
  auto r = cluster::testing::run_cmd(argv, {}, Deadline::after(std::chrono::seconds(max_time + 10)));
  HttpResult h;
  const auto nl = r.out.rfind('\n');
  if (nl == std::string::npos) return h;
  h.status = std::atoi(r.out.c_str() + nl + 1);
  h.body = r.out.substr(0, nl);
  return h;
}

bool wait_decoding(const std::string& base_url, int n) {
  for (auto until = Deadline::after(std::chrono::seconds(30)); !until.expired();) {
    auto j = nlohmann::json::parse(curl(base_url + "/health").body, nullptr, false);
    if (j.is_object() && j.value("active", -1) == n && j.value("in_flight", -1) == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

Result<KilledRun> streams_through_a_kill(ServeProc& server, int victim, int n, int tokens) {
  const fs::path client = fs::path(LATTICE_SOURCE_DIR) / "tests" / "node" / "openai_client.mjs";
  auto streams = cluster::testing::Proc::spawn(
      {"node", client.string(), "streams", server.base_url(), "none", std::to_string(n), std::to_string(tokens)}, {});
  if (!streams.ok()) return streams.status();
  // The rank goes as soon as every stream decodes (no fixed nap: on a fast machine a short
  // generation could end inside it, and then nothing was lost mid-stream).
  // The client's word that each stream has a piece, then the server's that all n still decode.
  auto started = streams->wait_err_line("every stream decodes", Deadline::after(std::chrono::seconds(60)));
  if (!started.ok()) return Internal("not every stream started: " + started.status().to_string() + "; stderr: " + streams->err());
  if (!wait_decoding(server.base_url(), n)) return Internal("not every stream decodes; stderr: " + streams->err());
  const pid_t pid = rank_pid(server.proc().pid(), victim);
  if (pid <= 0) return Internal("no rank " + std::to_string(victim) + " under the server's launcher");
  KilledRun run;
  run.killed_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (::kill(pid, SIGKILL) != 0) return ErrnoError("kill rank " + std::to_string(victim), errno);
  auto code = streams->wait(Deadline::after(std::chrono::seconds(240)));
  if (!code.ok()) return code.status();
  if (!WIFEXITED(*code) || WEXITSTATUS(*code) != 0) return Internal("the client failed: " + streams->err());
  run.streams = nlohmann::json::parse(streams->out(), nullptr, false);
  if (!run.streams.is_object()) return Corrupt("the client's report is not JSON: " + streams->out());
  // The kill must have landed mid-stream: every stream still had text to come after it.
  for (const auto& s : run.streams["streams"]) {
    const auto& at = s["at_ms"];
    if (!at.is_array() || at.empty() || at.back().get<int64_t>() <= run.killed_ms)
      return Internal("a stream had ended before rank " + std::to_string(victim) +
                      " was killed: the test needs more tokens per stream on this machine");
  }
  return run;
}

pid_t rank_pid(pid_t launcher, int rank) {
  std::ifstream children("/proc/" + std::to_string(launcher) + "/task/" + std::to_string(launcher) + "/children");
  pid_t child;
  while (children >> child) {
    std::ifstream env("/proc/" + std::to_string(child) + "/environ", std::ios::binary);
    std::stringstream ss;
    ss << env.rdbuf();
    const std::string all = ss.str();
    size_t at = 0;
    while (at < all.size()) {
      const std::string var = all.c_str() + at;
      if (var == "LATTICE_RANK=" + std::to_string(rank)) return child;
      at += var.size() + 1;
    }
  }
  return -1;
}

double metric(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  return -1;
}

}  // namespace lattice::serve::testing
