// `lattice sim (-m FILE | --preset NAME) --hostfile FILE [--hosts K] [--parallel tp|pp|ep|auto]
// [--context N] [--prompt N] [--batch B] [--engine lattice|mlx|llamacpp-rpc] [--json]`: what a model
// would do on a cluster (docs/SIM.md). `--list-presets` lists the built-in models, machines, link
// media and engines; `--calibrate -o FILE [-m MODEL]` writes this machine's machine file;
// `--compare A.json,B.json [--svg FILE]` tabulates configurations against node counts.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <memory>
#include <string>

#include "command.h"
#include "lattice/cluster/topology.h"
#include "lattice/engine/gguf/gguf.h"
#include "lattice/sim/link.h"
#include "lattice/sim/sim.h"
#include "lattice/sim/whatif.h"
#include "sim_cli.h"

namespace lattice::cli {
namespace {

struct SimArgs {
  std::string model, preset, hostfile, parallel = "auto", engine = "lattice", machine, out, compare, svg, fit, calibrate_from;
  int hosts = 0, threads = 1;
  uint32_t ctx = 4096, prompt = 512, batch = 1;
  bool json = false, list = false, calibrate = false, sustained = false, quick = false;
};

int fail(const std::string& m) {
  std::fprintf(stderr, "lattice sim: %s\n", m.c_str());
  return 2;
}

void list_presets() {
  std::printf("models (--preset):\n");
  for (const auto& n : sim::shape_preset_names()) {
    auto s = sim::shape_preset(n);
    std::printf("  %-22s %7.1f GB, %6.2f GB read per token  (%s)\n", n.c_str(), s->total_bytes() / 1e9,
                s->bytes_per_step(1) / 1e9, s->source.c_str());
  }
  std::printf("machines (\"machine\" in a topology host, or --machine):\n");
  for (const auto& n : sim::machine_preset_names()) {
    auto m = sim::machine_preset(n);
    std::printf("  %-14s %5.0f GB/s  %5.1f TFLOP/s  %4.0f GB  %3.0f W%s\n", n.c_str(), m->mem_bw_gbs, m->compute_tflops,
                m->memory_gb, m->power_load_w, m->throttles ? "  laptop: throttles when sustained" : "");
  }
  std::printf("link media (\"medium\" in a topology link):\n");
  for (const auto& n : sim::link_preset_names()) {
    auto l = sim::link_preset(n);
    std::printf("  %-14s %7.1f us one way  %6.2f GB/s\n", n.c_str(), l->latency_us, l->gbytes_s);
  }
  std::printf("engines (--engine):");
  for (const auto& n : sim::engine_profile_names()) std::printf(" %s", n.c_str());
  std::printf("\n");
}

std::string dir_of(const std::string& path) {
  auto p = path.rfind('/');
  return p == std::string::npos ? "." : path.substr(0, p);
}

}  // namespace

Result<sim::ModelShape> load_shape(const std::string& model, const std::string& preset) {
  if (!preset.empty()) return sim::shape_preset(preset);
  engine::OpenOptions oo;
  oo.allow_unsupported_types = true;
  LATTICE_ASSIGN_OR_RETURN(auto file, engine::GgufFile::open(model, oo));
  return sim::shape_from_gguf(*file, model.substr(model.rfind('/') + 1));
}


namespace {

// --compare A.json[:engine[:mode]],B.json...: every configuration at 1..its host count.
int run_compare(const SimArgs& a, const sim::ModelShape& shape, sim::SimOptions o) {
  std::vector<sim::Series> series;
  std::string item;
  std::stringstream list(a.compare);
  while (std::getline(list, item, ',')) {
    std::string file = item, engine = a.engine, mode = a.parallel;
    if (auto c = file.find(':'); c != std::string::npos) {
      engine = file.substr(c + 1);
      file = file.substr(0, c);
      if (auto d = engine.find(':'); d != std::string::npos) {
        mode = engine.substr(d + 1);
        engine = engine.substr(0, d);
      }
    }
    auto topo = cluster::load_topology(file);
    if (!topo.ok()) return fail(topo.status().to_string());
    auto m = sim::parse_mode(mode);
    if (!m.ok()) return fail(m.status().message());
    sim::SimOptions so = o;
    so.engine = engine;
    so.mode = *m;
    so.base_dir = dir_of(file);
    sim::Series s;
    std::string stem = file.substr(file.rfind('/') + 1);
    s.label = stem.substr(0, stem.rfind('.')) + " " + engine + " " + mode;
    if (!a.fit.empty()) {
      double tok_s = 0;
      int k = 0;
      if (std::sscanf(a.fit.c_str(), "%lf@%d", &tok_s, &k) != 2) return fail("--fit wants TOK_S@HOSTS");
      auto e = sim::fit_decode_efficiency(shape, *topo, so, k, tok_s);
      if (!e.ok()) return fail(item + ": " + e.status().to_string());
      so.decode_efficiency = *e;
    }
    for (int k = 1; k <= static_cast<int>(topo->hosts.size()); ++k) {
      so.hosts = k;
      auto r = sim::simulate(shape, *topo, so);
      if (!r.ok()) return fail(item + " at " + std::to_string(k) + " hosts: " + r.status().to_string());
      s.nodes.push_back(k);
      s.tok_s.push_back(r->fits ? r->decode_tok_s : 0);
    }
    series.push_back(std::move(s));
  }
  std::printf("decode tok/s, %s\n%s", shape.name.c_str(), sim::whatif_table(series).c_str());
  if (!a.svg.empty()) {
    std::ofstream f(a.svg);
    f << sim::whatif_svg(series, shape.name + ": decode tok/s against nodes");
    if (!f) return fail("cannot write " + a.svg);
    std::printf("wrote %s\n", a.svg.c_str());
  }
  return 0;
}

int run_sim(const SimArgs& a) {
  if (a.list) {
    list_presets();
    return 0;
  }
  if (a.calibrate) return run_calibrate({a.out, a.model, a.machine.empty() ? "this-machine" : a.machine, a.quick});
  if (a.model.empty() == a.preset.empty()) return fail("give -m FILE or --preset NAME (--list-presets lists them)");
  if (a.hostfile.empty() && a.compare.empty())
    return fail("give --hostfile FILE (a topology file, as for plan and launch)");
  auto mode = sim::parse_mode(a.parallel);
  if (!mode.ok()) return fail(mode.status().message());
  auto shape = load_shape(a.model, a.preset);
  if (!shape.ok()) return fail(shape.status().to_string());
  sim::SimOptions o;
  o.mode = *mode;
  o.hosts = a.hosts;
  o.n_ctx = a.ctx;
  o.prompt = a.prompt;
  o.batch = a.batch;
  o.threads = a.threads;
  o.engine = a.engine;
  o.sustained = a.sustained;
  o.default_machine = a.machine;
  if (!a.compare.empty()) return run_compare(a, *shape, o);
  auto topo = cluster::load_topology(a.hostfile);
  if (!topo.ok()) return fail(topo.status().to_string());
  o.base_dir = dir_of(a.hostfile);
  if (!a.fit.empty()) {
    // TOK_S@K: the engine's efficiency that makes K hosts decode TOK_S (a published one-node figure).
    double tok_s = 0;
    int k = 0;
    char tail = 0;
    if (std::sscanf(a.fit.c_str(), "%lf@%d%c", &tok_s, &k, &tail) != 2 || tok_s <= 0 || k < 1)
      return fail("--fit wants TOK_S@HOSTS, e.g. 19.5@1");
    auto e = sim::fit_decode_efficiency(*shape, *topo, o, k, tok_s);
    if (!e.ok()) return fail(e.status().to_string());
    o.decode_efficiency = *e;
    if (!a.json) std::printf("fitted decode efficiency %.3f (%.1f tok/s at %d hosts)\n", *e, tok_s, k);
  }
  if (!a.calibrate_from.empty()) {
    // This model's own one-node run: its efficiencies, fitted on the first host alone.
    if (!a.fit.empty()) return fail("give --fit or --calibrate-from, not both");
    auto fig = read_bench_figures(a.calibrate_from, a.model);
    if (!fig.ok()) return fail(fig.status().message());
    auto c = sim::calibrate_one_node(*shape, *topo, o, *fig);
    if (!c.ok()) return fail("--calibrate-from " + a.calibrate_from + ": " + c.status().to_string());
    o = *c;
    if (o.decode_efficiency > 1 || o.prefill_efficiency > 1)
      std::fprintf(stderr,
                   "lattice sim: warning: fitted efficiencies %.2f / %.2f: the run beat the machine file's read or "
                   "compute figure (measured while the machine was loaded?); recalibrate on a quiet machine\n",
                   o.decode_efficiency, o.prefill_efficiency);
    if (!a.json) {
      std::printf("calibrated on one node: %.1f tok/s decode -> efficiency %.3f", fig->decode_tok_s, o.decode_efficiency);
      if (o.token_overhead_ms > 0) std::printf(" (%.2f ms a token outside the forward step, kept whole)", o.token_overhead_ms);
      if (o.prefill_efficiency > 0)
        std::printf(", %.1f tok/s prefill of %u -> %.3f of compute", fig->prefill_tok_s, fig->prefill_tokens,
                    o.prefill_efficiency);
      std::printf("\n");
    }
  }
  auto r = sim::simulate(*shape, *topo, o);
  if (!r.ok()) return fail(r.status().to_string());
  if (a.json) {
    auto j = sim::to_json(*r);
    if (o.decode_efficiency > 0) j["fitted_decode_efficiency"] = o.decode_efficiency;
    if (o.prefill_efficiency > 0) j["fitted_prefill_efficiency"] = o.prefill_efficiency;
    if (o.token_overhead_ms > 0) j["token_overhead_ms"] = o.token_overhead_ms;
    std::printf("%s\n", j.dump(2).c_str());
  }
  else std::printf("%s", sim::render_text(*r).c_str());
  if (!r->fits) return 1;
  return 0;
}

Registrar sim_cmd{{"sim", "predict a model on a cluster: tok/s, time to first token, memory and traffic per node",
                   [](CLI::App& app) {
                     auto a = std::make_shared<SimArgs>();
                     app.add_option("-m,--model", a->model, "GGUF file (only its header and tensor table are read)");
                     app.add_option("--preset", a->preset, "a built-in model shape (--list-presets)");
                     app.add_option("--hostfile", a->hostfile, "topology file: hosts with \"machine\", links with \"medium\"");
                     app.add_option("--hosts,--nodes", a->hosts, "use the first K hosts of the file (0: all)");
                     app.add_option("--parallel", a->parallel, "tp, pp, ep or auto (as lattice plan chooses)")
                         ->capture_default_str();
                     app.add_option("--context", a->ctx, "KV cache tokens per sequence")->capture_default_str();
                     app.add_option("--prompt", a->prompt, "prompt tokens (prefill, time to first token)")->capture_default_str();
                     app.add_option("--batch", a->batch, "sequences decoded together")->capture_default_str();
                     app.add_option("-t,--threads", a->threads, "threads per rank (CPU machines)")->capture_default_str();
                     app.add_option("--engine", a->engine, "lattice, mlx (exo) or llamacpp-rpc")->capture_default_str();
                     app.add_option("--machine", a->machine,
                                    "machine for hosts without one (preset or file); with --calibrate: its name");
                     app.add_option("--fit", a->fit,
                                    "TOK_S@K: calibrate the engine's decode efficiency so K hosts decode TOK_S");
                     app.add_option("--calibrate-from", a->calibrate_from,
                                    "BENCH.json: fit the efficiencies to this model's one-node run (`lattice bench "
                                    "engine -m FILE --json` output; the first host alone)");
                     app.add_flag("--sustained", a->sustained, "apply thermal throttling of machines that throttle");
                     app.add_flag("--json", a->json, "print one JSON object");
                     app.add_option("--compare", a->compare,
                                    "what-if: FILE[:engine[:mode]],... each at 1..its hosts, as a table");
                     app.add_option("--svg", a->svg, "with --compare: also plot tok/s against nodes to this SVG");
                     app.add_flag("--list-presets", a->list, "list model, machine, link and engine presets");
                     app.add_flag("--calibrate", a->calibrate, "measure this machine and write a machine file (-o)");
                     app.add_option("-o,--output", a->out, "with --calibrate: the machine file to write");
                     app.add_flag("--quick", a->quick, "with --calibrate: smaller measurements (tests)");
                     return [a] { return run_sim(*a); };
                   }}};

}  // namespace
}  // namespace lattice::cli
