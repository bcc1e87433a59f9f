// `lattice bench engine`: llama-bench style throughput of the engine on one GGUF file.
// For every thread count: pp<N> (prefill N tokens from an empty cache, one batch pass) and
// tg<N> (N single-token decode steps from an empty cache), each repeated -r times after one
// warm-up run; the table reports tokens/s as mean +- sd over the repetitions. With
// --batch B1,B2,..., each tg<N> also runs B sequences at once (batched decode: one forward
// step advances all B, each with its own cache and position) and reports the aggregate
// tokens/s of all B, as tg<N>@b<B>.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.h"
#include "engine_cli.h"
#include "lattice/engine/runtime/forward.h"

namespace lattice::cli {
namespace {

struct BenchArgs {
  std::string model;
  std::string prompts = "512";
  std::string gens = "128";
  std::string threads = "1";
  int reps = 5;
  int batch = 512;           // tokens per prefill pass
  std::string seqs = "1";    // sequences decoded together (--batch)
  bool json = false, no_pack = false;
};

int fail(const std::string& msg) {
  std::fprintf(stderr, "lattice bench engine: %s\n", msg.c_str());
  return 2;
}

// "64,512" -> {64, 512}; every value must be in [lo, hi].
Result<std::vector<int>> parse_list(const std::string& s, const char* flag, int lo, int hi) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (...) {
      used = 0;
    }
    if (used != item.size() || v < lo || v > hi)
      return InvalidArgument(std::string(flag) + ": '" + item + "' is not an integer in " + std::to_string(lo) +
                             ".." + std::to_string(hi));
    out.push_back(v);
  }
  return out;
}

struct Stats {
  double mean = 0, sd = 0;
  std::vector<double> samples;
};
Stats stats(std::vector<double> v) {
  Stats s;
  s.samples = v;
  if (v.empty()) return s;
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  if (v.size() > 1) {
    double acc = 0;
    for (double x : v) acc += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(acc / (v.size() - 1));
  }
  return s;
}

int run(const BenchArgs& a) {
  auto prompts = parse_list(a.prompts, "-p", 0, 1 << 16);
  auto gens = parse_list(a.gens, "-n", 0, 1 << 16);
  auto threads = parse_list(a.threads, "-t", 1, 1024);
  if (!prompts.ok()) return fail(prompts.status().message());
  if (!gens.ok()) return fail(gens.status().message());
  if (!threads.ok() || threads->empty()) return fail(threads.ok() ? "-t: no thread count" : threads.status().message());
  if (a.reps < 1) return fail("-r must be >= 1");
  if (a.batch < 1) return fail("-b must be >= 1");
  auto seqs = parse_list(a.seqs, "--batch", 1, 256);
  if (!seqs.ok() || seqs->empty()) return fail(seqs.ok() ? "--batch: no batch size" : seqs.status().message());
  const int max_b = *std::max_element(seqs->begin(), seqs->end());

  auto model = load_model_with_progress(a.model, !a.no_pack, a.json);
  if (!model.ok()) return fail(model.status().to_string());
  const engine::Model& m = **model;
  const uint32_t V = m.hparams().n_vocab;
  int max_p = 0, max_n = 0;
  for (int p : *prompts) max_p = std::max(max_p, p);
  for (int n : *gens) max_n = std::max(max_n, n);
  const uint32_t n_ctx = static_cast<uint32_t>(std::max({max_p, max_n, 1}));

  std::mt19937 rng(1234);
  std::vector<int32_t> tokens(static_cast<size_t>(std::max(max_p, 1)));
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % V);

  const std::string model_desc = std::string(m.arch().name) + " " + human_params(m.n_params()) + " " + m.type_name();
  const std::string commit = build_commit(), flags = build_flags(), isa = build_isa();
  nlohmann::json rows = nlohmann::json::array();
  if (!a.json) {
    std::printf("| model | size | params | type | threads | test | t/s | MiB read/tok |\n");
    std::printf("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |\n");
  }
  using Clock = std::chrono::steady_clock;
  for (int t : *threads) {
    engine::SoloGroup solo;
    engine::ForwardOptions fo;
    fo.n_ctx = n_ctx;
    fo.n_threads = static_cast<uint32_t>(t);
    fo.n_batch = static_cast<uint32_t>(std::max(a.batch, max_b));
    fo.max_items = static_cast<uint32_t>(max_b);
    auto forward = engine::Forward::create(m, solo, fo);
    if (!forward.ok()) return fail(forward.status().to_string());
    engine::Forward& f = **forward;
    std::vector<std::unique_ptr<engine::Sequence>> seq;
    for (int i = 0; i < max_b; ++i) {
      auto s = f.new_sequence(n_ctx);
      if (!s.ok()) return fail(s.status().to_string());
      seq.push_back(std::move(*s));
    }
    struct Test {
      bool prefill;
      int n;
      int b;  // sequences
    };
    std::vector<Test> tests;
    for (int p : *prompts)
      if (p > 0) tests.push_back({true, p, 1});
    for (int n : *gens)
      if (n > 0)
        for (int b : *seqs) tests.push_back({false, n, b});
    for (const Test& test : tests) {
      std::vector<double> tok_s;
      double bytes_per_tok = 0;  // weight bytes streamed per token (all of a step's, shared by its B tokens)
      for (int rep = -1; rep < a.reps; ++rep) {  // rep -1: warm-up, not recorded
        for (auto& s : seq) s->reset();
        const uint64_t read0 = f.weight_bytes_read();
        const auto t0 = Clock::now();
        Status st;
        if (test.prefill) {
          // In passes of at most -b tokens, as a session's prefill.
          for (int done = 0; done < test.n && st.ok();) {
            const int n = std::min(a.batch, test.n - done);
            engine::StepItem it;
            it.seq = seq[0].get();
            it.tokens = std::span<const int32_t>(tokens.data() + done, static_cast<size_t>(n));
            st = f.step(std::span<const engine::StepItem>(&it, 1));
            done += n;
          }
        } else {
          std::vector<engine::StepItem> items(static_cast<size_t>(test.b));
          for (int i = 0; i < test.b; ++i) {
            items[size_t(i)].seq = seq[size_t(i)].get();
            items[size_t(i)].tokens = std::span<const int32_t>(tokens.data() + i % tokens.size(), 1);
          }
          for (int i = 0; i < test.n && st.ok(); ++i) st = f.step(items);
        }
        const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
        if (!st.ok()) return fail(st.to_string());
        if (rep >= 0) tok_s.push_back(double(test.n) * test.b / sec);
        bytes_per_tok = double(f.weight_bytes_read() - read0) / (double(test.n) * test.b);
      }
      const Stats st = stats(tok_s);
      std::string name = (test.prefill ? "pp" : "tg") + std::to_string(test.n);
      if (!test.prefill && (test.b > 1 || seqs->size() > 1)) name += "@b" + std::to_string(test.b);
      if (a.json) {
        nlohmann::json r;
        r["model"] = model_desc;
        r["model_file"] = a.model;
        r["model_bytes"] = m.weight_bytes();
        r["n_params"] = m.n_params();
        r["type"] = m.type_name();
        r["threads"] = t;
        r["test"] = name;
        r["n_prompt"] = test.prefill ? test.n : 0;
        r["n_gen"] = test.prefill ? 0 : test.n;
        r["batch"] = test.b;
        r["weight_bytes_per_token"] = bytes_per_tok;
        r["prefill_tok_s"] = test.prefill ? nlohmann::json(st.mean) : nlohmann::json(nullptr);
        r["prefill_tok_s_sd"] = test.prefill ? nlohmann::json(st.sd) : nlohmann::json(nullptr);
        r["decode_tok_s"] = test.prefill ? nlohmann::json(nullptr) : nlohmann::json(st.mean);
        r["decode_tok_s_sd"] = test.prefill ? nlohmann::json(nullptr) : nlohmann::json(st.sd);
        r["avg_ts"] = st.mean;
        r["stddev_ts"] = st.sd;
        r["samples_ts"] = st.samples;
        r["repetitions"] = a.reps;
        r["kv_cache_bytes"] = seq[0]->kv_bytes();
        r["commit"] = commit;
        r["build_flags"] = flags;
        r["isa"] = isa;
        rows.push_back(r);
      } else {
        std::printf("| %s | %s | %s | %s | %d | %s | %.2f ± %.2f | %.1f |\n", model_desc.c_str(),
                    human_bytes(m.weight_bytes()).c_str(), human_params(m.n_params()).c_str(),
                    m.type_name().c_str(), t, name.c_str(), st.mean, st.sd, bytes_per_tok / double(1 << 20));
        std::fflush(stdout);
      }
    }
  }
  if (a.json) {
    std::printf("%s\n", rows.dump(2).c_str());
  } else {
    std::printf("\ncommit %s, %s, isa %s\n", commit.c_str(), flags.c_str(), isa.c_str());
  }
  return 0;
}

Registrar bench_engine_cmd{
    {"bench engine", "llama-bench style prefill/decode throughput of a GGUF model", [](CLI::App& app) {
       auto a = std::make_shared<BenchArgs>();
       app.add_option("-m,--model", a->model, "GGUF file")->required();
       app.add_option("-p,--n-prompt", a->prompts, "prompt lengths (comma list; 0 skips)")->capture_default_str();
       app.add_option("-n,--n-gen", a->gens, "generated tokens (comma list; 0 skips)")->capture_default_str();
       app.add_option("-t,--threads", a->threads, "thread counts (comma list)")->capture_default_str();
       app.add_option("-r,--repetitions", a->reps, "repetitions of each test")->capture_default_str();
       app.add_option("-b,--n-batch", a->batch, "tokens per prefill pass")->capture_default_str();
       app.add_option("--batch", a->seqs, "sequences decoded together (comma list): tg reports their aggregate t/s")
           ->capture_default_str();
       app.add_flag("--no-pack", a->no_pack, "use every weight in place from the mapping (no repacking)");
       app.add_flag("--json", a->json, "JSON: one object per row");
       return [a] { return run(*a); };
     }}};

}  // namespace
}  // namespace lattice::cli
