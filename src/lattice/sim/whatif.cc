#include "lattice/sim/whatif.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace lattice::sim {
namespace {

std::string f(const char* fmt, double v) {
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

}  // namespace

std::string whatif_table(const std::vector<Series>& series) {
  std::set<int> all;
  for (const Series& s : series) all.insert(s.nodes.begin(), s.nodes.end());
  std::string t = "| configuration |";
  for (int n : all) t += " " + std::to_string(n) + (n == 1 ? " node |" : " nodes |");
  t += "\n| --- |";
  for (size_t i = 0; i < all.size(); ++i) t += " ---: |";
  t += "\n";
  for (const Series& s : series) {
    t += "| " + s.label + " |";
    for (int n : all) {
      auto it = std::find(s.nodes.begin(), s.nodes.end(), n);
      double v = it == s.nodes.end() ? -1 : s.tok_s[static_cast<size_t>(it - s.nodes.begin())];
      t += v < 0 ? " |" : v == 0 ? " does not fit |" : " " + f("%.1f", v) + " |";
    }
    t += "\n";
  }
  return t;
}

std::string whatif_svg(const std::vector<Series>& series, const std::string& title) {
  const double W = 720, H = 440, L = 70, R = 220, T = 40, B = 50;
  int max_n = 1;
  double max_v = 1;
  for (const Series& s : series) {
    for (int n : s.nodes) max_n = std::max(max_n, n);
    for (double v : s.tok_s) max_v = std::max(max_v, v);
  }
  // A round top for the y axis.
  const double mag = std::pow(10, std::floor(std::log10(max_v)));
  const double top = std::ceil(max_v / mag * 1.05) * mag;
  auto x = [&](double n) { return L + (max_n == 1 ? 0.5 : (n - 1) / (max_n - 1)) * (W - L - R); };
  auto y = [&](double v) { return H - B - v / top * (H - T - B); };
  static const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + f("%.0f", W) + "\" height=\"" + f("%.0f", H) +
                  "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + f("%.0f", L) + "\" y=\"24\" font-size=\"15\">" + escape(title) + "</text>\n";
  for (int i = 0; i <= 5; ++i) {
    const double v = top * i / 5;
    s += "<line x1=\"" + f("%.1f", L) + "\" x2=\"" + f("%.1f", W - R) + "\" y1=\"" + f("%.1f", y(v)) + "\" y2=\"" +
         f("%.1f", y(v)) + "\" stroke=\"#ddd\"/>\n";
    s += "<text x=\"" + f("%.1f", L - 8) + "\" y=\"" + f("%.1f", y(v) + 4) + "\" text-anchor=\"end\">" + f("%g", v) +
         "</text>\n";
  }
  for (int n = 1; n <= max_n; ++n)
    s += "<text x=\"" + f("%.1f", x(n)) + "\" y=\"" + f("%.1f", H - B + 18) + "\" text-anchor=\"middle\">" +
         std::to_string(n) + "</text>\n";
  s += "<text x=\"" + f("%.1f", (L + W - R) / 2) + "\" y=\"" + f("%.1f", H - 12) +
       "\" text-anchor=\"middle\">nodes</text>\n";
  s += "<text transform=\"translate(18," + f("%.1f", (T + H - B) / 2) +
       ") rotate(-90)\" text-anchor=\"middle\">decode tok/s</text>\n";
  s += "<line x1=\"" + f("%.1f", L) + "\" x2=\"" + f("%.1f", L) + "\" y1=\"" + f("%.1f", T) + "\" y2=\"" +
       f("%.1f", H - B) + "\" stroke=\"black\"/>\n<line x1=\"" + f("%.1f", L) + "\" x2=\"" + f("%.1f", W - R) +
       "\" y1=\"" + f("%.1f", H - B) + "\" y2=\"" + f("%.1f", H - B) + "\" stroke=\"black\"/>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& se = series[i];
    const std::string c = colours[i % 8];
    std::string pts;
    for (size_t k = 0; k < se.nodes.size(); ++k) {
      if (se.tok_s[k] <= 0) continue;
      pts += f("%.1f", x(se.nodes[k])) + "," + f("%.1f", y(se.tok_s[k])) + " ";
      s += "<circle cx=\"" + f("%.1f", x(se.nodes[k])) + "\" cy=\"" + f("%.1f", y(se.tok_s[k])) + "\" r=\"3\" fill=\"" + c +
           "\"/>\n";
    }
    if (!pts.empty()) s += "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" + c + "\" points=\"" + pts + "\"/>\n";
    const double ly = T + 16 + 20.0 * i;
    s += "<line x1=\"" + f("%.1f", W - R + 14) + "\" x2=\"" + f("%.1f", W - R + 34) + "\" y1=\"" + f("%.1f", ly - 4) +
         "\" y2=\"" + f("%.1f", ly - 4) + "\" stroke-width=\"2\" stroke=\"" + c + "\"/>\n";
    s += "<text x=\"" + f("%.1f", W - R + 40) + "\" y=\"" + f("%.1f", ly) + "\">" + escape(se.label) + "</text>\n";
  }
  return s + "</svg>\n";
}

}  // namespace lattice::sim
