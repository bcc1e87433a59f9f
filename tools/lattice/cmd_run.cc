// `lattice run`: generate text from a GGUF model on this node, streaming it to stdout and
// ending with prompt and generation speed; --json prints one object instead.
#include <algorithm>
#include <random>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "command.h"
#include "dist_run.h"
#include "engine_cli.h"
#include "lattice/engine/runtime/forward.h"
#include "lattice/engine/runtime/generator.h"
#include "lattice/engine/tokenizer/from_gguf.h"

namespace lattice::cli {
namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "lattice run: %s\n", msg.c_str());
  return 2;
}

int run(const RunArgs& a) {
  if (a.discover.on && a.nodes > 0) return fail("--discover finds the hosts: no --nodes");
  if (a.nodes > 0 || a.demo || a.discover.on || under_cluster_launcher()) return run_distributed(a);
  if (a.model.empty()) return fail("-m is required");
  if (a.deadline_s != 0) return fail("--deadline-s bounds a --nodes job (under lattice launch: launch --deadline-s)");
  if (a.n_predict < 0) return fail("-n must be >= 0");
  if (a.threads < 0 || a.threads > 1024) return fail("-t must be in 1..1024 (0: all cores)");
  if (a.ctx < 0) return fail("--ctx must be >= 0");
  if (a.prompt.empty()) return fail("the prompt (-p) is empty");
  engine::SamplerParams sp = sampler_params(a);
  if (!a.seed_set) sp.seed = static_cast<uint64_t>(std::random_device{}());
  if (auto st = sp.validate(); !st.ok()) return fail(st.message());
  if (!a.inject_fault.empty()) return fail("--inject-fault needs --nodes (a rank to lose)");

  auto model = load_model_with_progress(a.model, !a.no_pack, a.json);
  if (!model.ok()) return fail(model.status().to_string());
  auto tok = engine::tokenizer_from_gguf((*model)->file());
  if (!tok.ok()) return fail("tokenizer: " + tok.status().to_string());

  engine::GenerateOptions go;
  go.prompt = a.prompt;
  go.chat = a.chat;
  engine::GenerationRequest req;
  req.prompt = engine::prompt_tokens(*tok, go);
  req.n_predict = static_cast<uint32_t>(a.n_predict);
  req.stop_at_eog = !a.ignore_eos;
  req.sampler = sp;
  // The cache holds what this run needs, not the model's whole training context.
  const uint32_t need = static_cast<uint32_t>(req.prompt.size() + req.n_predict);
  engine::SoloGroup solo;
  engine::ForwardOptions fo;
  fo.n_ctx = a.ctx > 0 ? static_cast<uint32_t>(a.ctx) : std::max<uint32_t>(need, 1);
  fo.n_threads = a.threads > 0 ? static_cast<uint32_t>(a.threads) : std::max(1u, std::thread::hardware_concurrency());
  auto forward = engine::Forward::create(**model, solo, fo);
  if (!forward.ok()) return fail(forward.status().to_string());
  engine::GeneratorOptions gopt;
  gopt.prefill_chunk = (*forward)->options().n_batch;
  auto gen = engine::Generator::create(**forward, *tok, gopt);
  if (!gen.ok()) return fail(gen.status().to_string());

  // The prompt, then the text as it is generated (to a terminal or a pipe alike), then the report.
  if (!a.json) {
    std::fwrite(a.prompt.data(), 1, a.prompt.size(), stdout);
    std::fflush(stdout);
  }
  auto on_text = [&](std::string_view s) {
    if (a.json) return;
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  auto r = (*gen)->generate(std::move(req), on_text);
  if (!r.ok()) return fail(r.status().to_string());
  const uint32_t n_threads = fo.n_threads;
  if (a.json) {
    nlohmann::json j;
    j["tokens"] = r->tokens;
    j["text"] = r->text;
    j["prompt_tokens"] = r->prompt_tokens;
    j["n_prompt"] = r->prompt_tokens.size();
    j["n_gen"] = r->tokens.size();
    j["prefill_tok_s"] = r->prefill_tok_s();
    j["decode_tok_s"] = r->decode_tok_s();
    j["prefill_ms"] = r->prefill_seconds * 1e3;
    j["decode_ms"] = r->decode_seconds * 1e3;
    j["stop_reason"] = r->stop_reason;
    j["threads"] = n_threads;
    // Invalid UTF-8 from a random model must not make the dump throw.
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("\n");
  std::fprintf(stderr, "\nprompt: %zu tokens in %.1f ms, %.2f tok/s | generation: %zu tokens, %.2f tok/s (%u threads, %s)\n",
               r->prompt_tokens.size(), r->prefill_seconds * 1e3, r->prefill_tok_s(), r->tokens.size(),
               r->decode_tok_s(), n_threads, r->stop_reason.c_str());
  return 0;
}

Registrar run_cmd{{"run", "generate text from a GGUF model (llama, qwen2, qwen3, qwen3moe, Mixtral, deepseek2: DeepSeek V2/V3, Kimi K2) on this node or over --nodes ranks", [](CLI::App& app) {
                     auto a = std::make_shared<RunArgs>();
                     app.add_option("-m,--model", a->model, "GGUF file (the first file of a split set)");
                     app.add_option("-p,--prompt", a->prompt, "prompt text");
                     app.add_option("-n,--n-predict", a->n_predict, "tokens to generate")->capture_default_str();
                     app.add_option("-t,--threads", a->threads, "threads (0: all cores)")->capture_default_str();
                     app.add_option("--temp", a->temp, "temperature (0: greedy)")->capture_default_str();
                     app.add_option("--seed", a->seed, "sampling seed (default: random)")->each([a](const std::string&) {
                       a->seed_set = true;
                     });
                     app.add_option("--top-k", a->top_k, "top-k (<= 0: off)")->capture_default_str();
                     app.add_option("--top-p", a->top_p, "top-p (1: off)")->capture_default_str();
                     app.add_option("--min-p", a->min_p, "min-p (0: off)")->capture_default_str();
                     app.add_option("--repeat-penalty", a->repeat_penalty, "repetition penalty (1: off)")
                         ->capture_default_str();
                     app.add_option("--repeat-last-n", a->repeat_last_n, "window of the penalty")->capture_default_str();
                     app.add_option("--ctx", a->ctx, "context size (0: prompt + n)")->capture_default_str();
                     app.add_flag("--chat", a->chat, "wrap the prompt in the model's chat template (one user turn)");
                     app.add_flag("--ignore-eos", a->ignore_eos, "keep generating past end-of-generation tokens");
                     app.add_flag("--no-pack", a->no_pack, "use every weight in place from the mapping (no repacking)");
                     app.add_option("--nodes", a->nodes, "tensor parallel over N local ranks (processes); -t is per rank");
                     add_discover_flags(app, a->discover, "--nodes");
                     add_discover_host_flags(app, a->discover);
                     app.add_option("--provider", a->provider, "with --nodes: shm or tcp")->capture_default_str();
                     app.add_option("--parallel", a->parallel, "with --nodes: tp (tensor), pp (pipeline), ep (experts over ranks, the rest tensor) or auto (ep for mixture-of-experts files, else tp while every rank owns a KV head, else pp)")
                         ->capture_default_str();
                     app.add_option("--split", a->split, "with --nodes: share per rank, e.g. 3,1 (default equal; ep: each rank's memory)");
                     app.add_option("--ep-replicate", a->ep_replicate,
                                    "with --parallel ep: share (0..1) of the other ranks' experts each rank also holds; "
                                    "each step gives a chosen expert to its least busy holder (1: balanced, every expert everywhere)");
                     app.add_option("--ep-prefill", a->ep_prefill,
                                    "with --parallel ep: how a step's rows reach the experts: reduce (every rank all rows, "
                                    "all-reduces), a2a (rows split, all-to-all dispatch and combine) or auto (the measured rule)")
                         ->capture_default_str();
                     app.add_option("--ep-a2a-min-rows", a->ep_a2a_min_rows,
                                    "with --ep-prefill auto: all-to-all from steps of this many rows (0: never; default: the measured rule)");
                     app.add_option("--prefill-batch", a->batch, "with --nodes: prompt rows a step")->capture_default_str();
                     app.add_flag_callback("--no-recover", [a] { a->recover = false; },
                                           "with --nodes: fail when a rank is lost (default: the survivors take its work over)");
                     app.add_option("--inject-fault", a->inject_fault,
                                    "with --nodes: RANK@TOKEN[:stop], that rank kills (or stops) itself after TOKEN tokens, to see recovery");
                     app.add_option("--deadline-s", a->deadline_s,
                                    "with --nodes: bound on the whole job in seconds (0: none); ranks still running then "
                                    "are stopped and run exits 124")
                         ->capture_default_str();
                     app.add_option("--bind", a->bind,
                                    "with --nodes: pin the ranks to CPUs: auto (each rank CPUs of its own while they fit, "
                                    "else unpinned), cores (also beyond the CPUs: rank r on CPU r mod CPUs), none")
                         ->capture_default_str();
                     app.add_flag("--demo", a->demo, "with no -m: a small make-model model on 2 local ranks");
                     app.add_flag("--json", a->json, "print one JSON object (tokens, text, speeds) instead of text");
                     return [a] { return run(*a); };
                   }}};

}  // namespace
}  // namespace lattice::cli
