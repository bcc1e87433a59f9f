// The dashboard (GET /) in a real browser: Debian's headless Chromium loads the page from a
// running `lattice serve --nodes 2`, lets it poll /status, and its DOM must show what the
// test did: the requests it sent, two ranks drawn as nodes with a link between them, and a
// live token rate while a long stream runs, the link's latency and bandwidth measured at start,
// and every rank's machine (memory, CPU, temperature, power: a number or "n/a"). A screenshot is kept in the build tree
// (build/test-artifacts/dashboard.png). Skipped without chromium (scripts/setup.sh installs it),
// failing instead under LATTICE_REQUIRE=browser.
#include <gtest/gtest.h>

#include "../require.h"

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "serve_testlib.h"

namespace lattice::serve {
namespace {

namespace fs = std::filesystem;
using testing::curl;

std::string chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (fs::exists(p)) return p;
  return "";
}

// The page after `budget_ms` of its (virtual) time: polls have run.
std::string dump_dom(const std::string& browser, const std::string& url, int budget_ms) {
  auto r = cluster::testing::run_cmd({browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                      "--user-data-dir=" + (fs::temp_directory_path() / "lattice-chromium").string(),
                                      "--virtual-time-budget=" + std::to_string(budget_ms), "--dump-dom", url},
                                     {}, Deadline::after(std::chrono::seconds(90)));
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.err;
  return r.out;
}

// The text of the element with this id (<div ... id="ID">TEXT</div>), or "".
std::string by_id(const std::string& dom, const std::string& id) {
  std::smatch m;
  if (std::regex_search(dom, m, std::regex("id=\"" + id + "\"[^>]*>([^<]*)<"))) return m[1];
  return "";
}

TEST(ServeDashboardProcess, ChromiumShowsTheRanksTheRequestsAndALiveRate) {
  if (!fs::exists(cluster::testing::lattice_bin())) GTEST_SKIP() << "lattice not built";
  if (!testing::have_curl()) GTEST_SKIP() << "curl absent (scripts/setup.sh installs it)";
  const std::string browser = chromium();
  if (browser.empty()) LATTICE_SKIP_OR_FAIL("browser", "chromium absent (scripts/setup.sh installs it)");
  testing::TinyModel model(true);
  ASSERT_TRUE(model.ok());
  testing::ServeProc serve;
  ASSERT_TRUE(serve.start(model.path(), {"--nodes", "2", "-t", "1", "--slots", "2", "--ctx", "8000"}).ok())
      << serve.proc().err();
  // The page is one self-contained document: nothing it loads comes from elsewhere.
  auto page = curl(serve.base_url() + "/");
  ASSERT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<title>lattice serve</title>"), std::string::npos);
  EXPECT_EQ(page.body.find("src=\"http"), std::string::npos);
  EXPECT_EQ(page.body.find("href=\"http"), std::string::npos);

  const int sent = 3;
  for (int i = 0; i < sent; ++i)
    ASSERT_EQ(curl(serve.base_url() + "/v1/completions", {"-d", R"({"prompt":"abc","max_tokens":16})"}).status, 200);
  // A long stream runs while the browser looks: the rate it shows must be live.
  std::thread stream([&] {
    (void)curl(serve.base_url() + "/v1/completions",
               {"-d", R"({"prompt":"abc","max_tokens":7000,"ignore_eos":true,"stream":true})"});
  });
  // The browser looks once the stream is decoding (the server says so on /health).
  bool decoding = false;
  for (auto until = Deadline::after(std::chrono::seconds(60)); !decoding && !until.expired();) {
    auto j = nlohmann::json::parse(curl(serve.base_url() + "/health").body, nullptr, false);
    decoding = j.is_object() && j.value("in_flight", 0) >= 1;
    if (!decoding) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(decoding) << "the long stream never started";
  const std::string dom = dump_dom(browser, serve.base_url() + "/", 4000);
  EXPECT_EQ(by_id(dom, "state"), "live") << dom;
  EXPECT_EQ(by_id(dom, "requests"), std::to_string(sent)) << dom;
  EXPECT_EQ(by_id(dom, "world"), "2");
  EXPECT_EQ(by_id(dom, "active"), "1");
  EXPECT_GT(std::atof(by_id(dom, "tok_s").c_str()), 0) << "no live token rate: " << by_id(dom, "tok_s");
  EXPECT_NE(dom.find(">rank 0</text>"), std::string::npos);
  EXPECT_NE(dom.find(">rank 1</text>"), std::string::npos);
  EXPECT_NE(dom.find("<line "), std::string::npos) << "no link drawn";
  // The link's rate comes from the fabric's per-endpoint byte counters: live while decoding.
  const size_t label = dom.find("class=\"link\">");
  ASSERT_NE(label, std::string::npos) << dom;
  EXPECT_GT(std::atof(dom.c_str() + label + 13), 0) << dom.substr(label, 40);
  // Its figures from start: "<latency> µs · <bandwidth> Gbit/s", both positive.
  std::smatch fig;
  ASSERT_TRUE(std::regex_search(dom, fig, std::regex("class=\"linkfig\">([0-9.]+) \xC2\xB5s \xC2\xB7 ([0-9.]+) Gbit/s<")))
      << dom;
  EXPECT_GT(std::stod(fig[1]), 0);
  EXPECT_GT(std::stod(fig[2]), 0);
  // Every rank's machine: a figure, or "n/a" where the OS does not give it (memory and CPU
  // load always do on Linux).
  const std::regex number_or_na("^(n/a|[0-9][0-9.]*.*)$");
  for (const char* r : {"r0-", "r1-"}) {
    for (const char* k : {"mem", "cpu", "temp", "power"}) {
      const std::string v = by_id(dom, std::string(r) + k);
      EXPECT_TRUE(std::regex_match(v, number_or_na)) << r << k << ": \"" << v << "\"";
    }
    if (fs::exists("/proc/meminfo")) {
      EXPECT_NE(by_id(dom, std::string(r) + "mem"), "n/a");
      EXPECT_NE(by_id(dom, std::string(r) + "cpu"), "n/a");
    }
    EXPECT_EQ(by_id(dom, std::string(r) + "experts"), "dense");
    // Each rank's collective bytes/s, from the server's reports: live while decoding.
    EXPECT_GT(std::atof(by_id(dom, std::string(r) + "coll").c_str()), 0) << r << "coll: " << by_id(dom, std::string(r) + "coll");
  }

  const fs::path shots = fs::path(LATTICE_BINARY_DIR) / "test-artifacts";
  fs::create_directories(shots);
  auto shot = cluster::testing::run_cmd(
      {browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
       "--user-data-dir=" + (fs::temp_directory_path() / "lattice-chromium").string(), "--window-size=1200,900",
       "--virtual-time-budget=3000", "--screenshot=" + (shots / "dashboard.png").string(), serve.base_url() + "/"},
      {}, Deadline::after(std::chrono::seconds(90)));
  EXPECT_TRUE(fs::exists(shots / "dashboard.png")) << shot.err;
  ASSERT_TRUE(serve.stop().ok());
  stream.join();
}

}  // namespace
}  // namespace lattice::serve
