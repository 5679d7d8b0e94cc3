#include "bench/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"

namespace tf::bench {
namespace {

constexpr double kWidth = 760, kHeight = 440;
constexpr double kLeft = 80, kRight = 200, kTop = 40, kBottom = 60;  // margins: axis labels, legend
constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// Tick labels: integers as such, else up to 3 significant digits.
std::string label(double v) {
  if (std::fabs(v - std::round(v)) < 1e-9 * std::max(1.0, std::fabs(v))) return fmt::format("{:.0f}", v);
  return fmt::format("{:.3g}", v);
}

}  // namespace

std::vector<double> nice_ticks(double y_max) {
  if (!(y_max > 0) || !std::isfinite(y_max)) return {0.0, 1.0};
  const double raw = y_max / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double f : {1.0, 2.0, 5.0, 10.0}) {
    step = f * mag;
    if (std::ceil(y_max / step) <= 9) break;
  }
  std::vector<double> ticks;
  for (int i = 0; ticks.empty() || ticks.back() < y_max; ++i) ticks.push_back(i * step);
  return ticks;
}

std::string render_svg(const LineChart& c) {
  std::set<double> xs;
  double y_max = 0;
  for (const ChartSeries& s : c.series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y))
        throw Error(fmt::format("chart '{}': series '{}' has a non-finite point", c.title, s.name));
      if (c.log2_x && x <= 0)
        throw Error(fmt::format("chart '{}': series '{}' has x = {} on a log2 axis", c.title, s.name, x));
      xs.insert(x);
      y_max = std::max(y_max, y);
    }
  if (xs.empty()) throw Error(fmt::format("chart '{}': no points to draw", c.title));
  const std::vector<double> yt = nice_ticks(y_max);
  const double y_top = yt.back();
  const auto fx = [&](double x) { return c.log2_x ? std::log2(x) : x; };
  const double x_lo = fx(*xs.begin()), x_hi = fx(*xs.rbegin());
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  const auto px = [&](double x) {
    return x_hi > x_lo ? kLeft + (fx(x) - x_lo) / (x_hi - x_lo) * plot_w : kLeft + plot_w / 2;
  };
  const auto py = [&](double y) { return kTop + plot_h - (y_top > 0 ? y / y_top : 0) * plot_h; };

  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kWidth, kHeight);
  o += fmt::format("<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
                   kLeft + plot_w / 2, escape(c.title));
  // Grid, ticks and axes.
  for (double y : yt)
    o += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        kLeft, py(y), kLeft + plot_w, kLeft - 6, py(y) + 4, label(y));
  for (double x : xs)
    o += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#eee\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        px(x), kTop, kTop + plot_h, kTop + plot_h + 18, label(x));
  o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"black\"/>\n", kLeft,
                   kTop, plot_w, plot_h);
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", kLeft + plot_w / 2, kHeight - 15,
                   escape(c.x_label + (c.log2_x ? " (log scale)" : "")));
  o += fmt::format("<text x=\"18\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {0})\">{1}</text>\n",
                   kTop + plot_h / 2, escape(c.y_label));
  // Series and legend.
  for (size_t i = 0; i < c.series.size(); ++i) {
    const ChartSeries& s = c.series[i];
    const char* color = kColors[i % std::size(kColors)];
    const char* dash = s.dashed ? " stroke-dasharray=\"6 4\"" : "";
    std::string pts;
    for (const auto& [x, y] : s.points) pts += fmt::format("{}{:.1f},{:.1f}", pts.empty() ? "" : " ", px(x), py(y));
    o += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{} points=\"{}\"/>\n", color, dash, pts);
    if (!s.dashed)
      for (const auto& [x, y] : s.points)
        o += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px(x), py(y), color);
    const double ly = kTop + 10 + 20 * double(i);
    o += fmt::format(
        "<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"{3}\" stroke-width=\"2\"{4}/>"
        "<text x=\"{5}\" y=\"{6}\">{7}</text>\n",
        kWidth - kRight + 15, ly, kWidth - kRight + 40, color, dash, kWidth - kRight + 46, ly + 4, escape(s.name));
  }
  o += "</svg>\n";
  return o;
}

}  // namespace tf::bench
