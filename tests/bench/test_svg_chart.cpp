// The throughput-vs-batch chart: tick choice, the SVG's shapes and their placement, and the
// curve built from a bench result.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "bench/decode_curve.h"
#include "bench/svg_chart.h"
#include "core/error.h"

namespace tf {
namespace {

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// The (x, y) pixel pairs of the n-th polyline.
std::vector<std::pair<double, double>> polyline(const std::string& svg, int n) {
  std::smatch m;
  std::string rest = svg;
  const std::regex re("<polyline[^>]*points=\"([^\"]*)\"");
  for (int i = 0; i <= n; ++i) {
    EXPECT_TRUE(std::regex_search(rest, m, re)) << "polyline " << n;
    if (i < n) rest = m.suffix();
  }
  std::vector<std::pair<double, double>> pts;
  const std::string pts_text = m[1];
  const std::regex pair_re("([0-9.]+),([0-9.]+)");
  for (auto it = std::sregex_iterator(pts_text.begin(), pts_text.end(), pair_re); it != std::sregex_iterator(); ++it)
    pts.emplace_back(std::stod((*it)[1]), std::stod((*it)[2]));
  return pts;
}

TEST(SvgChart, NiceTicksCoverTheDataInRoundSteps) {
  const std::vector<double> t = bench::nice_ticks(6159.7);
  ASSERT_GE(t.size(), 3u);
  EXPECT_EQ(t.front(), 0.0);
  EXPECT_GE(t.back(), 6159.7);
  EXPECT_LE(t.size(), 10u);
  EXPECT_DOUBLE_EQ(t[1], 1000.0);
  for (size_t i = 1; i < t.size(); ++i) EXPECT_DOUBLE_EQ(t[i] - t[i - 1], t[1]);
  EXPECT_DOUBLE_EQ(bench::nice_ticks(239.0)[1], 50.0);
  EXPECT_DOUBLE_EQ(bench::nice_ticks(0.8)[1], 0.1);  // 9 ticks: 0 .. 0.8
  EXPECT_EQ(bench::nice_ticks(0.0), (std::vector<double>{0.0, 1.0}));
}

TEST(SvgChart, DrawsEverySeriesWithPointsPlacedByValue) {
  const bench::LineChart c{.title = "t <&>",
                           .x_label = "batch",
                           .y_label = "tokens/s",
                           .log2_x = true,
                           .series = {{.name = "a<b", .points = {{1, 100}, {4, 400}, {16, 1600}}},
                                      {.name = "roof", .points = {{1, 200}, {16, 3200}}, .dashed = true}}};
  const std::string svg = bench::render_svg(c);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "<polyline"), 2);
  EXPECT_EQ(count(svg, "<circle"), 3);  // markers for the solid series only
  EXPECT_EQ(count(svg, "stroke-dasharray"), 2);  // the dashed line and its legend entry
  EXPECT_NE(svg.find("a&lt;b"), std::string::npos);
  EXPECT_NE(svg.find("t &lt;&amp;&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
  for (const char* tick : {">1<", ">4<", ">16<"}) EXPECT_NE(svg.find(tick), std::string::npos) << tick;
  const auto p = polyline(svg, 0);
  ASSERT_EQ(p.size(), 3u);
  // log2 x: 1, 4, 16 are equally spaced; larger y is higher (smaller pixel y), linear from 0.
  EXPECT_NEAR(p[1].first - p[0].first, p[2].first - p[1].first, 0.2);
  EXPECT_GT(p[0].second, p[1].second);
  EXPECT_GT(p[1].second, p[2].second);
  const auto r = polyline(svg, 1);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_NEAR(r[0].first, p[0].first, 0.1);
  EXPECT_NEAR(r[1].first, p[2].first, 0.1);
  // pixel y is affine in y: (y=100, 400, 1600) -> equal pixel ratios
  const double per_unit = (p[0].second - p[1].second) / 300.0;
  EXPECT_NEAR(p[1].second - p[2].second, per_unit * 1200.0, 0.3);
}

TEST(SvgChart, RejectsWhatCannotBeDrawn) {
  EXPECT_THROW(bench::render_svg(bench::LineChart{.title = "empty"}), Error);
  EXPECT_THROW(bench::render_svg(bench::LineChart{.log2_x = true, .series = {{.name = "z", .points = {{0, 1}}}}}),
               Error);
  EXPECT_THROW(bench::render_svg(bench::LineChart{.series = {{.name = "n", .points = {{1, NAN}}}}}), Error);
  // one x only: drawn (centred), no division by a zero range
  EXPECT_NO_THROW(bench::render_svg(bench::LineChart{.series = {{.name = "one", .points = {{8, 5}}}}}));
}

TEST(DecodeCurve, OneSeriesPerVariantSortedByBatchPlusTheRoofline) {
  nlohmann::json out{{"model", "/tmp/l8"}};
  for (const char* v : {"default", "no-fusion"})
    for (int b : {32, 1, 8})
      out["runs"].push_back({{"variant", v}, {"prompt_len", 128}, {"batch", b},
                             {"decode_tokens_per_s", b * (std::string(v) == "default" ? 200.0 : 180.0)},
                             {"weight_roofline_tokens_per_s", 264.0 * b}});
  const bench::LineChart c = bench::decode_curve(out);
  ASSERT_EQ(c.series.size(), 3u);
  EXPECT_EQ(c.series[0].name, "default");
  EXPECT_EQ(c.series[1].name, "no-fusion");
  EXPECT_EQ(c.series[2].name, "weight roofline");
  EXPECT_TRUE(c.series[2].dashed);
  ASSERT_EQ(c.series[0].points.size(), 3u);
  EXPECT_EQ(c.series[0].points[0], (std::pair<double, double>{1, 200}));
  EXPECT_EQ(c.series[0].points[2], (std::pair<double, double>{32, 6400}));
  EXPECT_EQ(c.series[1].points[1], (std::pair<double, double>{8, 1440}));
  EXPECT_EQ(c.series[2].points[2], (std::pair<double, double>{32, 264.0 * 32}));
  EXPECT_TRUE(c.log2_x);
  EXPECT_NE(c.title.find("/tmp/l8"), std::string::npos);
  EXPECT_NO_THROW(bench::render_svg(c));
}

TEST(DecodeCurve, NamesWhatIsMissing) {
  try {
    bench::decode_curve(nlohmann::json{{"model", "x"}});
    FAIL() << "no runs accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("runs"), std::string::npos);
  }
  try {
    bench::decode_curve(nlohmann::json{{"runs", {{{"batch", 1}}}}});
    FAIL() << "a run without decode_tokens_per_s accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("runs[0]"), std::string::npos);
  }
}

}  // namespace
}  // namespace tf
