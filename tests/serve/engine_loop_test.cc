// EngineLoop in process on a tiny make-model model: jobs from other threads share the
// Generator's steps and each gets what it gets alone; the bound refuses; cancel and stop end
// jobs; every job's on_done comes exactly once.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>

#include "lattice/engine/runtime/forward.h"
#include "lattice/engine/tokenizer/from_gguf.h"
#include "lattice/serve/engine_loop.h"
#include "serve_testlib.h"

namespace lattice::serve {
namespace {

using namespace std::chrono_literals;

struct Done {
  std::promise<Result<engine::GenerateResult>> promise;
  std::string streamed;
  std::atomic<int> n_done{0};
};

class EngineLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(model_file_.ok());
    auto m = engine::Model::load(model_file_.path());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
    auto t = engine::tokenizer_from_gguf(model_->file());
    ASSERT_TRUE(t.ok());
    tok_ = std::make_unique<engine::Tokenizer>(std::move(*t));
    auto f = engine::Forward::create(*model_, group_, {.n_threads = 1, .n_batch = 64, .max_items = 4, .n_ctx = 128});
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    forward_ = std::move(*f);
  }
  std::unique_ptr<EngineLoop> start(size_t max_jobs, uint32_t max_queue = 16) {
    auto loop = EngineLoop::start(
        [this, max_queue] {
          return engine::Generator::create(*forward_, *tok_,
                                           {.max_seqs = 4, .n_ctx = 128, .prefill_chunk = 16, .max_queue = max_queue});
        },
        {.max_jobs = max_jobs});
    EXPECT_TRUE(loop.ok()) << loop.status().to_string();
    return loop.ok() ? std::move(*loop) : nullptr;
  }
  engine::GenerationRequest request(const std::string& prompt, uint32_t n = 12) {
    engine::GenerationRequest r;
    r.prompt = tok_->encode(prompt);
    r.n_predict = n;
    r.stop_at_eog = false;
    r.sampler.temperature = 0;
    return r;
  }
  static JobSink sink(Done* d) {
    return {[d](std::string_view p) { d->streamed += p; },
            [d](Result<engine::GenerateResult> r) {
              if (d->n_done.fetch_add(1) == 0) d->promise.set_value(std::move(r));
            }};
  }
  static Result<engine::GenerateResult> wait(Done& d) {
    auto f = d.promise.get_future();
    if (f.wait_for(30s) != std::future_status::ready) return Timeout("job did not finish");
    return f.get();
  }

  testing::TinyModel model_file_;
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<engine::Tokenizer> tok_;
  engine::SoloGroup group_;
  std::unique_ptr<engine::Forward> forward_;
};

TEST_F(EngineLoopTest, ConcurrentJobsGetWhatTheyGetAlone) {
  auto loop = start(20);
  ASSERT_TRUE(loop);
  const int n = 6;  // more than the 4 slots: two wait for one
  std::vector<std::string> alone(n);
  for (int i = 0; i < n; ++i) {
    Done d;
    ASSERT_TRUE(loop->submit(request("prompt " + std::to_string(i) + " x"), sink(&d)).ok());
    auto r = wait(d);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->tokens.size(), 12u);
    EXPECT_EQ(d.streamed, r->text);
    alone[i] = r->text;
  }
  std::vector<std::unique_ptr<Done>> dones;
  std::vector<std::thread> threads;  // submitted from several threads at once
  for (int i = 0; i < n; ++i) dones.push_back(std::make_unique<Done>());
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] { ASSERT_TRUE(loop->submit(request("prompt " + std::to_string(i) + " x"), sink(dones[i].get())).ok()); });
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    auto r = wait(*dones[i]);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->text, alone[i]) << i;
    EXPECT_EQ(r->stop_reason, "length");
  }
  const auto s = loop->stats();
  EXPECT_EQ(s.completed, 2u * n);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.tokens_generated, 2u * n * 12);
}

// The first job's sink holds the engine's thread at its first piece until the test opens the gate,
// so neither job can end before the third is submitted and the cancel is queued (a tiny model
// decodes 100 tokens in a few milliseconds: a test thread descheduled that long between the
// submits saw the bound free again, CI at b026a2d).
TEST_F(EngineLoopTest, TheBoundRefusesAndCancelEnds) {
  auto loop = start(2);
  ASSERT_TRUE(loop);
  Done a, b, c;
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  JobSink held = sink(&a);
  held.on_piece = [&a, gate](std::string_view p) {
    (void)gate.wait_for(30s);
    a.streamed += p;
  };
  ASSERT_TRUE(loop->submit(request("long one", 100), std::move(held)).ok());
  auto idb = loop->submit(request("long two", 100), sink(&b));
  ASSERT_TRUE(idb.ok());
  auto refused = loop->submit(request("three"), sink(&c));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(c.n_done.load(), 0);  // a refused job's sink is never called
  loop->cancel(*idb);
  loop->cancel(9999);  // unknown: ignored
  open.set_value();
  auto rb = wait(b);
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->stop_reason, "cancelled");
  EXPECT_LT(rb->tokens.size(), 100u);
  auto ra = wait(a);
  ASSERT_TRUE(ra.ok());
  EXPECT_EQ(ra->stop_reason, "length");
  EXPECT_EQ(loop->stats().cancelled, 1u);
}

TEST_F(EngineLoopTest, GeneratorRefusalsAndStopReachTheSink) {
  auto loop = start(8);
  ASSERT_TRUE(loop);
  Done bad;
  auto r = request("x");
  r.prompt.push_back(100000);  // outside the vocabulary: the Generator refuses
  ASSERT_TRUE(loop->submit(std::move(r), sink(&bad)).ok());
  auto rb = wait(bad);
  ASSERT_FALSE(rb.ok());
  EXPECT_EQ(rb.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(loop->stats().failed, 1u);
  std::vector<std::unique_ptr<Done>> dones;
  for (int i = 0; i < 6; ++i) {
    dones.push_back(std::make_unique<Done>());
    ASSERT_TRUE(loop->submit(request("long", 110), sink(dones.back().get())).ok());
  }
  loop->stop();
  for (auto& d : dones) {
    EXPECT_EQ(d->n_done.load(), 1);  // each exactly once, by the time stop() returns
  }
  auto late = loop->submit(request("late"), sink(&bad));
  EXPECT_EQ(late.status().code(), ErrorCode::kCancelled);
  EXPECT_EQ(loop->stats().in_flight, 0u);
}

}  // namespace
}  // namespace lattice::serve
