// The training loop end to end on small text: BPE, loss going down, checkpoints (atomic,
// checked, resumed bit for bit), the GGUF loaded by the engine and by llama.cpp.
#include "lattice/train/train.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../require.h"
#include "lattice/engine/model/model.h"
#include "lattice/engine/runtime/session.h"
#include "lattice/train/bpe.h"
#include "lattice/train/checkpoint.h"
#include "lattice/train/data.h"

namespace lattice::train {
namespace {

namespace fs = std::filesystem;

const char* kText =
    "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
    "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.\n"
    "And God said, Let there be light: and there was light. And God saw the light, that it was good: and God "
    "divided the light from the darkness. And God called the light Day, and the darkness he called Night. And "
    "the evening and the morning were the first day.\n";

class TrainFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("lattice-train-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    std::ofstream f(dir_ / "corpus.txt");
    for (int i = 0; i < 30; ++i) f << kText;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  TrainOptions small() const {
    TrainOptions o;
    o.data = {(dir_ / "corpus.txt").string()};
    o.model = {.vocab = 300, .dim = 32, .layers = 2, .heads = 4, .kv_heads = 2, .ffn = 64};
    o.steps = 12;
    o.batch = 4;
    o.seq = 32;
    o.lr = 5e-3f;
    o.warmup = 2;
    o.threads = 2;
    o.val_every = 4;
    o.val_windows = 4;
    o.val_fraction = 0.1;
    return o;
  }
  fs::path dir_;
};

TEST(TrainBpe, RoundTripsAndIsDeterministic) {
  const std::string text = std::string(kText) + kText + "Numbers 3:14, and UTF-8: caf\xc3\xa9.\n";
  auto a = train_bpe(text, 320);
  auto b = train_bpe(text, 320);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->merges, b->merges);
  EXPECT_EQ(a->tokens.size(), 320u);
  EXPECT_EQ(a->tokens[a->eos_id], "<|endoftext|>");
  auto tok = a->tokenizer();
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const auto ids = tok->encode(text, {.add_special = false});
  EXPECT_LT(ids.size(), text.size() / 2);  // the merges compress
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_FALSE(train_bpe(text, 100).ok());
}

TEST_F(TrainFixture, LossFallsAndTheGgufLoadsInTheEngine) {
  TrainOptions o = small();
  o.steps = 40;
  o.out = (dir_ / "m.gguf").string();
  o.loss_csv = (dir_ / "loss.csv").string();
  o.loss_svg = (dir_ / "loss.svg").string();
  SoloGroup solo;
  auto r = train(o, solo);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->steps, 40u);
  EXPECT_LT(r->final_loss, 0.6 * r->history.front().loss);
  EXPECT_GT(r->val_loss, 0);
  EXPECT_TRUE(r->recoveries.empty());
  auto model = engine::Model::load(o.out);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ((*model)->hparams().n_vocab, 300u);
  std::ifstream csv(o.loss_csv);
  std::string line;
  size_t lines = 0;
  while (std::getline(csv, line)) ++lines;
  EXPECT_EQ(lines, 41u);
  EXPECT_TRUE(fs::file_size(o.loss_svg) > 500);
}

TEST_F(TrainFixture, ResumeContinuesBitForBit) {
  SoloGroup solo;
  TrainOptions straight = small();
  straight.checkpoint = (dir_ / "straight.ckpt").string();
  ASSERT_TRUE(train(straight, solo).ok());

  TrainOptions first = small();
  first.checkpoint = (dir_ / "split.ckpt").string();
  first.checkpoint_every = 5;
  first.stop_after = 7;  // "killed" after step 7: the checkpoint on disk is the one of step 5
  auto part = train(first, solo);  // 12 steps planned
  ASSERT_TRUE(part.ok()) << part.status().to_string();
  EXPECT_EQ(part->steps, 7u);
  TrainOptions rest;
  rest.resume = first.checkpoint;
  rest.checkpoint = first.checkpoint;
  rest.threads = 1;  // the thread count does not change the bits either
  auto r = train(rest, solo);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto a = read_checkpoint(straight.checkpoint);
  auto b = read_checkpoint(rest.checkpoint);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->params, b->params);
  EXPECT_EQ(a->m, b->m);
  EXPECT_EQ(a->v, b->v);
  EXPECT_EQ(a->header.at("history"), b->header.at("history"));
}

TEST_F(TrainFixture, CheckpointSurvivesAKilledWriterProcessAndDamageIsCaught) {
  const std::string path = (dir_ / "c.ckpt").string();
  Checkpoint c{{{"generation", 0}}, std::vector<float>(1 << 21, 0.0f), std::vector<float>(1 << 21, 0.0f),
               std::vector<float>(1 << 21, 0.0f)};
  ASSERT_TRUE(write_checkpoint(path, c).ok());
  const pid_t child = ::fork();
  if (child == 0) {  // rewrite it forever, each time with new contents, until killed
    for (int g = 1;; ++g) {
      c.header["generation"] = g;
      std::fill(c.params.begin(), c.params.end(), static_cast<float>(g));
      if (!write_checkpoint(path, c).ok()) ::_exit(3);
    }
  }
  ::usleep(300 * 1000);
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  auto back = read_checkpoint(path);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  const int g = back->header.at("generation");
  EXPECT_EQ(back->params.front(), static_cast<float>(g));
  EXPECT_EQ(back->params.back(), static_cast<float>(g));
  // A damaged or truncated file is refused, naming it.
  fs::resize_file(path, fs::file_size(path) - 100);
  auto cut = read_checkpoint(path);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().to_string().find("c.ckpt"), std::string::npos);
}

TEST_F(TrainFixture, BadOptionsGetClearErrors) {
  SoloGroup solo;
  TrainOptions o = small();
  o.data = {(dir_ / "missing.txt").string()};
  auto r = train(o, solo);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("missing.txt"), std::string::npos);
  o = small();
  o.seq = 100000;
  EXPECT_FALSE(train(o, solo).ok());
  o = small();
  o.model.heads = 5;
  EXPECT_FALSE(train(o, solo).ok());
  o = small();
  o.resume = (dir_ / "corpus.txt").string();  // not a checkpoint
  r = train(o, solo);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("not a lattice checkpoint"), std::string::npos);
}

}  // namespace
}  // namespace lattice::train

namespace lattice::train {
namespace {

std::pair<int, std::string> run_lattice(const std::string& args) {
  const std::string cmd = std::string(LATTICE_BINARY_DIR) + "/lattice train " + args + " 2>&1";
  std::string out;
  int rc = -1;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, got);
    rc = ::pclose(p);
  }
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, out};
}

TEST(TrainCliProcess, BadFlagsGetAClearErrorAndAnExitCode) {
  auto [rc, out] = run_lattice("--steps 3");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("--data"), std::string::npos) << out;
  std::tie(rc, out) = run_lattice("--data /nonexistent/x.txt --steps 3");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("/nonexistent/x.txt"), std::string::npos) << out;
  std::tie(rc, out) = run_lattice("--data /etc/hostname --inject-fault 1@5");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("--nodes"), std::string::npos) << out;
  std::tie(rc, out) = run_lattice("--data /etc/hostname --nodes 2 --inject-fault 5@1");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("rank 5"), std::string::npos) << out;
  std::tie(rc, out) = run_lattice("--data /etc/hostname --arch qwen2");
  EXPECT_EQ(rc, 2);
}

}  // namespace
}  // namespace lattice::train
