// A line chart as a standalone SVG document: the throughput-vs-batch curve of `twofold bench`
// (--plot) and `twofold plot`. Written here rather than through a plotting library: the
// product is one C++ binary, the chart is a few dozen SVG elements, and a viewer (any
// browser) is all a user needs.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tf::bench {

struct ChartSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in the given order
  bool dashed = false;                             // e.g. a roofline
};

struct LineChart {
  std::string title, x_label, y_label;
  bool log2_x = false;  // x on a log2 axis (batch sizes); every x must then be > 0
  std::vector<ChartSeries> series;
};

// The SVG text: axes with ticks at every distinct x and at "nice" y steps from 0, one
// polyline with point markers per series, a legend. Labels are XML-escaped. tf::Error when
// no series has a point, or log2_x with an x <= 0; non-finite points are rejected too.
std::string render_svg(const LineChart& chart);

// The y ticks render_svg draws for data up to y_max: 0 and multiples of a step of 1, 2 or 5
// times a power of ten, the last one >= y_max, at most 10 of them.
std::vector<double> nice_ticks(double y_max);

}  // namespace tf::bench
