#include "train_dist.h"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace lattice::cli {
namespace {

nlohmann::json report_json(const train::TrainReport& r, const train::TrainOptions& o, int world) {
  nlohmann::json rec = nlohmann::json::array();
  for (const auto& ev : r.recoveries)
    rec.push_back({{"step", ev.step}, {"world_before", ev.world_before}, {"world_after", ev.world_after},
                   {"reason", ev.reason}});
  return {{"steps", r.steps},         {"final_loss", r.final_loss},     {"val_loss", r.val_loss},
          {"samples_per_s", r.samples_per_s}, {"tokens_per_s", r.tokens_per_s}, {"seconds", r.seconds},
          {"n_params", r.n_params},   {"world_size", world},            {"recoveries", rec},
          {"output", o.out},          {"checkpoint", o.checkpoint}};
}

}  // namespace

int print_train_report(const TrainArgs& a, const train::TrainReport& r, int world) {
  if (a.json) {
    std::printf("%s\n", report_json(r, a.options, world).dump().c_str());
    return 0;
  }
  std::fprintf(stderr, "trained %llu steps: loss %.4f, validation loss %.4f, %.1f samples/s (%.0f tok/s) on %d rank(s)\n",
               static_cast<unsigned long long>(r.steps), r.final_loss, r.val_loss, r.samples_per_s, r.tokens_per_s,
               world);
  for (const auto& ev : r.recoveries)
    std::fprintf(stderr, "  recovered at step %llu: %d -> %d ranks (%s)\n", static_cast<unsigned long long>(ev.step),
                 ev.world_before, ev.world_after, ev.reason.c_str());
  if (!a.options.out.empty()) std::printf("%s\n", a.options.out.c_str());
  return 0;
}

int run_train(const TrainArgs& a, const train::ProgressFn& progress) {
  if (a.nodes != 1) {
    std::fprintf(stderr, "lattice train: --nodes %d: data parallel is not built yet\n", a.nodes);
    return 2;
  }
  train::SoloGroup solo;
  auto r = train::train(a.options, solo, progress);
  if (!r.ok()) {
    std::fprintf(stderr, "lattice train: %s\n", r.status().to_string().c_str());
    return 1;
  }
  return print_train_report(a, *r, 1);
}

}  // namespace lattice::cli
