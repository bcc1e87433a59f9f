// The loss curve as CSV and as a small self-contained SVG (train loss line, validation dots).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "lattice/train/train.h"

namespace lattice::train {

Status write_loss_csv(const std::string& path, const std::vector<StepRecord>& history) {
  std::ofstream f(path);
  if (!f) return IoError("cannot write " + path);
  f << "step,loss,val_loss,lr\n";
  char line[128];
  for (const StepRecord& r : history) {
    std::snprintf(line, sizeof line, "%llu,%.6f,%s,%.6g\n", static_cast<unsigned long long>(r.step + 1), r.loss,
                  r.val_loss >= 0 ? std::to_string(r.val_loss).c_str() : "", r.lr);
    f << line;
  }
  f.close();
  return f ? Status::Ok() : IoError("write " + path + " failed");
}

Status write_loss_svg(const std::string& path, const std::vector<StepRecord>& history) {
  const double W = 640, H = 360, L = 60, R = 20, T = 20, B = 40;
  double lo = 1e300, hi = -1e300;
  for (const StepRecord& r : history) {
    lo = std::min(lo, r.loss);
    hi = std::max(hi, r.loss);
    if (r.val_loss >= 0) lo = std::min(lo, r.val_loss), hi = std::max(hi, r.val_loss);
  }
  if (history.empty()) lo = 0, hi = 1;
  if (hi - lo < 1e-9) hi = lo + 1;
  const double n = std::max<double>(1, history.empty() ? 1 : double(history.back().step + 1));
  auto X = [&](double step) { return L + (W - L - R) * step / n; };
  auto Y = [&](double loss) { return T + (H - T - B) * (hi - loss) / (hi - lo); };
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<line x1=\"" << L << "\" y1=\"" << H - B << "\" x2=\"" << W - R << "\" y2=\"" << H - B << "\" stroke=\"black\"/>\n"
    << "<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\"" << H - B << "\" stroke=\"black\"/>\n";
  char buf[64];
  for (int i = 0; i <= 4; ++i) {
    const double v = lo + (hi - lo) * i / 4;
    std::snprintf(buf, sizeof buf, "%.3f", v);
    s << "<text x=\"" << L - 5 << "\" y=\"" << Y(v) + 4 << "\" text-anchor=\"end\">" << buf << "</text>\n";
  }
  s << "<text x=\"" << (W + L) / 2 << "\" y=\"" << H - 8 << "\" text-anchor=\"middle\">step (of " << n << ")</text>\n";
  s << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
  for (const StepRecord& r : history) s << X(double(r.step + 1)) << "," << Y(r.loss) << " ";
  s << "\"/>\n";
  for (const StepRecord& r : history)
    if (r.val_loss >= 0) s << "<circle cx=\"" << X(double(r.step + 1)) << "\" cy=\"" << Y(r.val_loss) << "\" r=\"3\" fill=\"#ff7f0e\"/>\n";
  s << "<text x=\"" << W - R << "\" y=\"" << T + 12 << "\" text-anchor=\"end\" fill=\"#1f77b4\">train loss</text>\n"
    << "<text x=\"" << W - R << "\" y=\"" << T + 28 << "\" text-anchor=\"end\" fill=\"#ff7f0e\">validation loss</text>\n</svg>\n";
  std::ofstream f(path);
  if (!f) return IoError("cannot write " + path);
  f << s.str();
  f.close();
  return f ? Status::Ok() : IoError("write " + path + " failed");
}

}  // namespace lattice::train
