// A node joining a running data-parallel job at a step boundary: real `lattice train` rank
// processes around a coordinator this test hosts (as `lattice launch` would), and a third
// process started with LATTICE_REJOIN=1 once the job is under way.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "lattice/cluster/bootstrap.h"
#include "lattice/train/checkpoint.h"
#include "train_testlib.h"
#include "lattice/train/train.h"
#include "proc_testlib.h"

namespace lattice::train {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;
using cluster::testing::Proc;

TEST(DpJoin, ProcessJoinsARunningTwoRankJobAndTheRunMatchesOneRank) {
  const fs::path dir = fs::temp_directory_path() / ("lattice-train-join-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "corpus.txt");
    for (int i = 0; i < 40; ++i)
      f << "In the beginning God created the heaven and the earth. And the earth was without form, and void; "
           "and darkness was upon the face of the deep "
        << i << ".\nAnd God said, Let there be light: and there was light.\n";
  }
  const auto secret = crypto::ClusterSecret::from_bytes({9, 3});
  cluster::CoordinatorOptions co;
  co.listen = "127.0.0.1:0";
  co.world_size = 2;
  co.secret = secret;
  auto coord = cluster::Coordinator::start(co);
  ASSERT_TRUE(coord.ok()) << coord.status().to_string();
  const std::string ckpt = (dir / "job.gguf.ckpt").string();
  const std::vector<std::string> argv = {
      cluster::testing::lattice_bin(), "train", "--data", (dir / "corpus.txt").string(), "--vocab", "300", "--dim", "32",
      "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "64", "--steps", "600", "--batch", "6", "--seq", "32",
      "--lr", "3e-3", "--warmup", "10", "--val-every", "0", "-t", "1", "--checkpoint-every", "20", "--json", "-q",
      "-o", (dir / "job.gguf").string()};
  auto env = [&](int rank, int world, bool rejoin) {
    cluster::testing::Env e = {{"LATTICE_RANK", std::to_string(rank)},
                               {"LATTICE_WORLD_SIZE", std::to_string(world)},
                               {"LATTICE_COORDINATOR", "127.0.0.1:" + std::to_string((*coord)->port())},
                               {"LATTICE_EXTERNAL_COORDINATOR", "1"},
                               {"LATTICE_SECRET", secret.to_hex()},
                               {"LATTICE_PROVIDER", "shm"}};
    if (rejoin) e.push_back({"LATTICE_REJOIN", "1"});
    return e;
  };
  std::vector<Proc> procs;
  for (int r = 0; r < 2; ++r) {
    auto p = Proc::spawn(argv, env(r, 2, false));
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    procs.push_back(std::move(*p));
  }
  // Under way: rank 0 wrote its step-20 checkpoint.
  const Deadline started = Deadline::after(120s);
  while (!fs::exists(ckpt) && !started.expired()) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(fs::exists(ckpt)) << "the 2-rank job made no progress";
  auto joiner = Proc::spawn(argv, env(2, 3, true));
  ASSERT_TRUE(joiner.ok()) << joiner.status().to_string();
  procs.push_back(std::move(*joiner));
  for (size_t i = 0; i < procs.size(); ++i) {
    auto st = procs[i].wait(Deadline::after(240s));
    ASSERT_TRUE(st.ok()) << "process " << i << ": " << st.status().to_string();
    EXPECT_EQ(*st, 0) << "process " << i << " stderr:\n" << procs[i].err();
  }
  const std::string& out = procs[0].out();
  const auto at = out.find('{');
  ASSERT_NE(at, std::string::npos) << out;
  const auto j = nlohmann::json::parse(out.substr(at, out.find('\n', at) - at), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["steps"], 600);
  EXPECT_EQ(j["world_size"], 3);
  EXPECT_EQ(j["recoveries"].size(), 0u);
  ASSERT_EQ(j["joins"].size(), 1u) << j.dump();
  EXPECT_EQ(j["joins"][0]["world_before"], 2);
  EXPECT_EQ(j["joins"][0]["world_after"], 3);
  const uint64_t join_step = j["joins"][0]["step"];
  EXPECT_GT(join_step, 20u);
  EXPECT_LT(join_step, 600u);
  // Every rank ended with the same weights (each checks with the others before it exits 0),
  // and they are one rank's on the same global batches up to float reassociation.
  TrainOptions one;
  one.data = {(dir / "corpus.txt").string()};
  one.model = {.vocab = 300, .dim = 32, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 64};
  one.steps = 600;
  one.batch = 6;
  one.seq = 32;
  one.lr = 3e-3f;
  one.warmup = 10;
  one.val_every = 0;
  one.threads = 1;
  one.checkpoint = (dir / "one.ckpt").string();
  SoloGroup solo;
  ASSERT_TRUE(train(one, solo).ok());
  auto a = read_checkpoint(one.checkpoint);
  auto b = read_checkpoint(ckpt);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_LE(testing::relative_l2(a->params, b->params), 1e-4);
  std::error_code ec;
  fs::remove_all(dir, ec);
}

}  // namespace
}  // namespace lattice::train
