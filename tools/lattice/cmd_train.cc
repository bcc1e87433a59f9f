// `lattice train`: trains a small Llama on text files and writes a GGUF that `lattice run`,
// `serve` and llama.cpp load (src/lattice/train/train.h; docs/TRAIN.md). Flag parsing only.
#include <unistd.h>

#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "command.h"
#include "lattice/train/train.h"
#include "dist_run.h"
#include "train_dist.h"

namespace lattice::cli {
namespace {

std::string duration_text(double s) {
  char b[32];
  if (s >= 3600) std::snprintf(b, sizeof b, "%dh%02dm", int(s / 3600), int(s / 60) % 60);
  else if (s >= 60) std::snprintf(b, sizeof b, "%dm%02ds", int(s / 60), int(s) % 60);
  else std::snprintf(b, sizeof b, "%.0fs", s);
  return b;
}

void print_progress(const train::Progress& p, bool tty) {
  const bool val = p.val_loss >= 0;
  // On a terminal one line redrawn in place; in a log a line per validation (and the last step).
  if (!tty && !val && p.step != p.steps && p.step % 10 != 0) return;
  const int width = 24, filled = int(width * double(p.step) / double(p.steps));
  std::string bar(size_t(filled), '#');
  bar.resize(width, '.');
  char line[256];
  std::snprintf(line, sizeof line, "[%s] step %llu/%llu  loss %.4f%s  %.0f tok/s  lr %.2e  ETA %s", bar.c_str(),
                static_cast<unsigned long long>(p.step), static_cast<unsigned long long>(p.steps), p.loss,
                val ? ("  val " + std::to_string(p.val_loss).substr(0, 6)).c_str() : "", p.tokens_per_s, p.lr,
                duration_text(p.eta_s).c_str());
  if (tty) std::fprintf(stderr, "\r%s\033[K%s", line, (val || p.step == p.steps) ? "\n" : "");
  else std::fprintf(stderr, "%s\n", line);
}

Registrar train_cmd{
    {"train", "train a small Llama on text files (byte-level BPE trained on them too) and write a GGUF",
     [](CLI::App& app) {
       auto a = std::make_shared<TrainArgs>();
       train::TrainOptions& o = a->options;
       app.add_option("--data", o.data, "text files to train on (the last part of the text is held out)");
       app.add_option("--arch", a->arch, "architecture (llama)")->capture_default_str();
       app.add_option("--dim", o.model.dim, "embedding length")->capture_default_str();
       app.add_option("--layers", o.model.layers, "number of blocks")->capture_default_str();
       app.add_option("--heads", o.model.heads, "attention heads")->capture_default_str();
       app.add_option("--kv-heads", o.model.kv_heads, "key/value heads (0: same as --heads)")->capture_default_str();
       app.add_option("--ffn", o.model.ffn, "feed-forward length")->capture_default_str();
       app.add_option("--vocab", o.model.vocab, "vocabulary size (the BPE trained on --data)")->capture_default_str();
       app.add_option("--steps", o.steps, "optimizer steps (default 200; resuming: the checkpoint's)");
       app.add_option("--batch", o.batch, "global batch, in sequences")->capture_default_str();
       app.add_option("--seq", o.seq, "sequence length (tokens)")->capture_default_str();
       app.add_option("--lr", o.lr, "peak learning rate (AdamW)")->capture_default_str();
       app.add_option("--warmup", o.warmup, "linear warmup steps, then cosine decay to lr/10")->capture_default_str();
       app.add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay (matrices)")->capture_default_str();
       app.add_option("--clip", o.clip, "clip gradients to this global norm (0: off)")->capture_default_str();
       app.add_option("--seed", o.seed, "weights and batches are a function of the seed")->capture_default_str();
       app.add_option("-t,--threads", o.threads, "threads per rank (0: all cores)")->capture_default_str();
       app.add_option("--val-every", o.val_every, "validation loss every N steps (0: at the end only)")
           ->capture_default_str();
       app.add_option("--val-windows", o.val_windows, "held-out windows of --seq tokens per validation")
           ->capture_default_str();
       app.add_option("-o,--output", o.out, "the GGUF to write");
       app.add_option("--checkpoint", o.checkpoint, "checkpoint file (default: OUTPUT.ckpt)");
       app.add_option("--checkpoint-every", o.checkpoint_every, "write the checkpoint every N steps (and at the end)");
       app.add_option("--resume", o.resume, "continue from a checkpoint (bit for bit on the same world size)");
       app.add_option("--loss-csv", o.loss_csv, "loss curve as CSV (default: OUTPUT.loss.csv)");
       app.add_option("--loss-svg", o.loss_svg, "loss curve as SVG (default: OUTPUT.loss.svg)");
       app.add_option("--nodes", a->nodes, "data parallel over N local rank processes")->capture_default_str();
       app.add_option("--provider", a->provider, "fabric provider between ranks (shm or tcp)")->capture_default_str();
       app.add_option("--inject-fault", a->inject_fault,
                      "RANK@STEP[:stop]: that rank SIGKILLs (or SIGSTOPs) itself at that step; the others go on");
       app.add_flag("--no-overlap", a->no_overlap, "all-reduce the gradients after backward, not during it");
       app.add_flag("--balance", o.balance,
                    "with --nodes: shares of the global batch by each rank's measured speed (--resume is then not bit for bit)");
       app.add_flag("--profile", o.profile,
                    "time each phase of a step (--json phase_ms: compute, wait for the slowest rank, reduce, update)");
       app.add_flag("--json", a->json, "print a final JSON object (steps, final_loss, val_loss, samples_per_s, recoveries)");
       app.add_flag("-q,--quiet", a->quiet, "no progress line");
       return [a]() -> int {
         train::TrainOptions& o = a->options;
         if (a->arch != "llama") {
           std::fprintf(stderr, "lattice train: --arch %s: only llama is implemented\n", a->arch.c_str());
           return 2;
         }
         if (o.data.empty() && o.resume.empty() && !under_cluster_launcher()) {  // ranks get the job in the environment
           std::fprintf(stderr, "lattice train: --data FILE... is required (or --resume CKPT)\n");
           return 2;
         }
         if (!o.out.empty()) {
           if (o.checkpoint.empty()) o.checkpoint = o.out + ".ckpt";
           if (o.loss_csv.empty()) o.loss_csv = o.out + ".loss.csv";
           if (o.loss_svg.empty()) o.loss_svg = o.out + ".loss.svg";
         }
         const bool tty = ::isatty(2) != 0;
         train::ProgressFn progress;
         if (!a->quiet) progress = [tty](const train::Progress& p) { print_progress(p, tty); };
         return run_train(*a, progress);
       };
     }}};

}  // namespace
}  // namespace lattice::cli
