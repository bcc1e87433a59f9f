#include "model_testlib.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "lattice/engine/quant/quantize.h"

namespace lattice::engine::testing {

MemModel make_mem_model(const MakeModelOptions& options, const LoadOptions& load) {
  MemModel m;
  auto plan = plan_model(options);
  if (!plan.ok()) {
    ADD_FAILURE() << "plan_model: " << plan.status().to_string();
    return m;
  }
  auto bytes = plan->writer.write_to_memory(plan->fill);
  if (!bytes.ok()) {
    ADD_FAILURE() << "write_to_memory: " << bytes.status().to_string();
    return m;
  }
  m.bytes = std::move(bytes).value();
  auto file = GgufFile::parse(m.bytes, "mem-" + options.arch + "-" + options.type);
  if (!file.ok()) {
    ADD_FAILURE() << "parse: " << file.status().to_string();
    return m;
  }
  auto model = Model::bind(std::move(file).value(), load);
  if (!model.ok()) {
    ADD_FAILURE() << "bind: " << model.status().to_string();
    return m;
  }
  m.model = std::move(model).value();
  return m;
}

MakeModelOptions small_moe_options(const std::string& arch, const std::string& type) {
  MakeModelOptions o;
  o.arch = arch;
  o.dim = 256;
  o.layers = 2;
  o.heads = 4;
  o.kv_heads = 2;
  if (arch == "qwen3moe") o.head_dim = 64;
  o.ffn = arch == "qwen3moe" ? 512 : 256;
  o.experts = 8;
  o.experts_used = 2;
  o.expert_ffn = arch == "qwen3moe" ? 128 : 0;
  o.vocab = 512;
  o.type = type;
  o.pure = true;
  o.seed = 9;
  o.threads = 1;
  return o;
}

MakeModelOptions small_deepseek2_options(const std::string& type) {
  MakeModelOptions o;
  o.arch = "deepseek2";
  o.dim = 256;
  o.layers = 3;
  o.heads = 4;
  o.ffn = 512;
  o.vocab = 512;
  o.q_lora = 64;
  o.kv_lora = 64;
  o.rope_dim = 16;
  o.nope_dim = 32;
  o.v_dim = 32;
  o.experts = 8;
  o.experts_used = 2;
  o.expert_groups = 4;
  o.groups_used = 2;
  o.shared_experts = 1;
  o.dense_layers = 1;
  o.expert_ffn = 128;
  o.rope_scale = 4;  // YaRN
  o.type = type;
  o.pure = true;
  o.seed = 9;
  o.threads = 1;
  return o;
}

namespace {
// A tensor of the file, dequantized to doubles (row-major, ne[0] contiguous).
std::vector<double> load(const GgufFile& f, const std::string& name) {
  const TensorInfo* t = f.find_tensor(name);
  if (!t) return {};
  std::vector<float> tmp(t->n_elems);
  const uint64_t rows = t->n_rows(), cols = t->ne[0];
  for (uint64_t r = 0; r < rows; ++r)
    EXPECT_TRUE(dequantize_row(t->type, t->data + r * t->row_bytes(), tmp.data() + r * cols, cols).ok());
  return {tmp.begin(), tmp.end()};
}

// y = W x, W stored [n_out][n_in]
std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x, size_t n_out) {
  const size_t n_in = x.size();
  std::vector<double> y(n_out, 0.0);
  for (size_t o = 0; o < n_out; ++o) {
    double s = 0;
    for (size_t i = 0; i < n_in; ++i) s += w[o * n_in + i] * x[i];
    y[o] = s;
  }
  return y;
}

void rmsnorm(std::vector<double>& x, size_t off, size_t n, const std::vector<double>& w, double eps) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
  const double s = 1.0 / std::sqrt(ss / n + eps);
  for (size_t i = 0; i < n; ++i) x[off + i] = x[off + i] * s * w[i];
}

// Rotary embedding as the architectures define it: llama rotates adjacent pairs, the NeoX
// layout (qwen) rotates element i with element i + n_rot/2.
void rope(std::vector<double>& v, size_t off, size_t n_rot, bool neox, double pos, double base,
          const std::vector<double>& factors) {
  for (size_t i = 0; i < n_rot / 2; ++i) {
    double theta = pos * std::pow(base, -2.0 * i / n_rot);
    if (!factors.empty()) theta /= factors[i];
    const double c = std::cos(theta), s = std::sin(theta);
    const size_t a = neox ? off + i : off + 2 * i;
    const size_t b = neox ? off + i + n_rot / 2 : off + 2 * i + 1;
    const double x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
  }
}
}  // namespace

RefOutput reference_forward(const Model& model, std::span<const int32_t> tokens) {
  const GgufFile& f = model.file();
  const Metadata& md = f.metadata();
  const std::string arch = *md.get_string("general.architecture");
  const size_t E = *md.get_u32(arch + ".embedding_length");
  const size_t L = *md.get_u32(arch + ".block_count");
  const size_t F = *md.get_u32(arch + ".feed_forward_length");
  const size_t H = *md.get_u32(arch + ".attention.head_count");
  const size_t HKV = md.get_u32_or(arch + ".attention.head_count_kv", H).value();
  const size_t HD = md.get_u32_or(arch + ".attention.key_length", E / H).value();
  const size_t n_rot = md.get_u32_or(arch + ".rope.dimension_count", HD).value();
  const double eps = md.get_f32_or(arch + ".attention.layer_norm_rms_epsilon", 1e-5f).value();
  const double base = md.get_f32(arch + ".rope.freq_base").value();
  const bool neox = arch != "llama";
  double pos_scale = 1.0;
  if (md.get_string_or(arch + ".rope.scaling.type", "none").value() == "linear")
    pos_scale = 1.0 / md.get_f32(arch + ".rope.scaling.factor").value();
  const std::vector<double> factors = load(f, "rope_freqs.weight");

  const auto emb = load(f, "token_embd.weight");
  const size_t V = emb.size() / E;
  auto out_w = load(f, "output.weight");
  if (out_w.empty()) out_w = emb;
  const auto out_norm = load(f, "output_norm.weight");
  const size_t T = tokens.size();

  std::vector<double> x(T * E);
  for (size_t t = 0; t < T; ++t)
    for (size_t i = 0; i < E; ++i) x[t * E + i] = emb[static_cast<size_t>(tokens[t]) * E + i];

  RefOutput out;
  for (size_t l = 0; l < L; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    const auto attn_norm = load(f, p + "attn_norm.weight"), ffn_norm = load(f, p + "ffn_norm.weight");
    const auto wq = load(f, p + "attn_q.weight"), wk = load(f, p + "attn_k.weight"), wv = load(f, p + "attn_v.weight"),
               wo = load(f, p + "attn_output.weight");
    const auto bq = load(f, p + "attn_q.bias"), bk = load(f, p + "attn_k.bias"), bv = load(f, p + "attn_v.bias");
    const auto qn = load(f, p + "attn_q_norm.weight"), kn = load(f, p + "attn_k_norm.weight");
    const auto wg = load(f, p + "ffn_gate.weight"), wu = load(f, p + "ffn_up.weight"),
               wd = load(f, p + "ffn_down.weight");
    std::vector<std::vector<double>> Q(T), K(T), Vv(T);
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> xn(x.begin() + t * E, x.begin() + (t + 1) * E);
      rmsnorm(xn, 0, E, attn_norm, eps);
      Q[t] = matvec(wq, xn, H * HD);
      K[t] = matvec(wk, xn, HKV * HD);
      Vv[t] = matvec(wv, xn, HKV * HD);
      for (size_t i = 0; i < bq.size(); ++i) Q[t][i] += bq[i];
      for (size_t i = 0; i < bk.size(); ++i) K[t][i] += bk[i];
      for (size_t i = 0; i < bv.size(); ++i) Vv[t][i] += bv[i];
      for (size_t h = 0; h < H; ++h) {
        if (!qn.empty()) rmsnorm(Q[t], h * HD, HD, qn, eps);
        rope(Q[t], h * HD, n_rot, neox, static_cast<double>(t) * pos_scale, base, factors);
      }
      for (size_t h = 0; h < HKV; ++h) {
        if (!kn.empty()) rmsnorm(K[t], h * HD, HD, kn, eps);
        rope(K[t], h * HD, n_rot, neox, static_cast<double>(t) * pos_scale, base, factors);
      }
    }
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> att(H * HD, 0.0);
      for (size_t h = 0; h < H; ++h) {
        const size_t kvh = h / (H / HKV);
        std::vector<double> sc(t + 1);
        double mx = -1e300;
        for (size_t j = 0; j <= t; ++j) {
          double s = 0;
          for (size_t d = 0; d < HD; ++d) s += Q[t][h * HD + d] * K[j][kvh * HD + d];
          sc[j] = s / std::sqrt(static_cast<double>(HD));
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (double& s : sc) sum += (s = std::exp(s - mx));
        for (size_t j = 0; j <= t; ++j)
          for (size_t d = 0; d < HD; ++d) att[h * HD + d] += sc[j] / sum * Vv[j][kvh * HD + d];
      }
      const auto o = matvec(wo, att, E);
      for (size_t i = 0; i < E; ++i) x[t * E + i] += o[i];
      std::vector<double> xn(x.begin() + t * E, x.begin() + (t + 1) * E);
      rmsnorm(xn, 0, E, ffn_norm, eps);
      auto g = matvec(wg, xn, F);
      const auto u = matvec(wu, xn, F);
      for (size_t i = 0; i < F; ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const auto d = matvec(wd, g, E);
      for (size_t i = 0; i < E; ++i) x[t * E + i] += d[i];
    }
    out.hidden.push_back(x);
  }
  out.logits.resize(T * V);
  for (size_t t = 0; t < T; ++t) {
    std::vector<double> xn(x.begin() + t * E, x.begin() + (t + 1) * E);
    rmsnorm(xn, 0, E, out_norm, eps);
    const auto lg = matvec(out_w, xn, V);
    std::copy(lg.begin(), lg.end(), out.logits.begin() + t * V);
  }
  return out;
}

double cosine(std::span<const double> a, std::span<const float> b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

double nmse(std::span<const double> ref, std::span<const float> got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (ref[i] - got[i]) * (ref[i] - got[i]);
    den += ref[i] * ref[i];
  }
  return num / std::max(den, 1e-300);
}

MakeModelOptions golden_model_options(const std::string& arch, const std::string& type) {
  MakeModelOptions o;
  o.arch = arch;
  o.type = type;
  o.dim = 128;
  o.layers = 2;
  o.heads = 4;
  o.kv_heads = 1;
  o.vocab = 384;
  o.seed = 2024;
  o.threads = 1;
  return o;
}

std::vector<int32_t> golden_prompt() {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 8; ++i) prompt.push_back((i * 53 + 3) % 384);
  return prompt;
}

Status write_gguf_py_deepseek2(const std::string& path) {
  const std::string src = LATTICE_SOURCE_DIR;
  const std::string cmd = "PYTHONPATH=\"$('" + src + "/scripts/gguf_py.sh' '" + std::string(LATTICE_BINARY_DIR) +
                          "')${PYTHONPATH:+:$PYTHONPATH}\" /usr/bin/python3 '" + src +
                          "/tests/engine/deepseek2_gguf_py.py' '" + path + "' 2>&1";
  std::string out;
  int rc = -1;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    rc = ::pclose(p);
  }
  if (rc != 0) return Unavailable("gguf-py did not write " + path + ": " + out);
  return Status::Ok();
}

}  // namespace lattice::engine::testing
