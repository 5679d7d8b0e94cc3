#include "bench/decode_curve.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tf::bench {

LineChart decode_curve(const nlohmann::json& out) {
  if (!out.is_object() || !out.contains("runs") || !out["runs"].is_array() || out["runs"].empty())
    throw Error("bench result: no \"runs\" array (expected the output of `twofold bench --json`)");
  // (variant, prompt length) -> batch -> tokens/s; the roofline of the first series.
  std::map<std::pair<std::string, int>, std::map<double, double>> curves;
  std::vector<std::pair<std::string, int>> order;
  std::map<double, double> roof;
  for (size_t i = 0; i < out["runs"].size(); ++i) {
    const nlohmann::json& r = out["runs"][i];
    if (!r.is_object() || !r.contains("batch") || !r["batch"].is_number() || !r.contains("decode_tokens_per_s") ||
        !r["decode_tokens_per_s"].is_number())
      throw Error(fmt::format("bench result: runs[{}] lacks a numeric \"batch\" or \"decode_tokens_per_s\"", i));
    const std::pair<std::string, int> key{r.value("variant", std::string("default")), r.value("prompt_len", 0)};
    if (!curves.count(key)) order.push_back(key);
    const double batch = r["batch"].get<double>();
    curves[key][batch] = r["decode_tokens_per_s"].get<double>();
    const double roof_tps = r.value("weight_roofline_tokens_per_s", 0.0);
    if (key == order.front() && roof_tps > 0) roof[batch] = roof_tps;
  }
  LineChart c{.title = "Decode throughput vs batch" +
                       (out.contains("model") && out["model"].is_string()
                            ? " (" + out["model"].get<std::string>() + ")"
                            : std::string()),
              .x_label = "batch (sequences decoded together)",
              .y_label = "decode tokens/s",
              .log2_x = true};
  const bool one_prompt = std::all_of(order.begin(), order.end(), [&](const auto& k) { return k.second == order[0].second; });
  for (const auto& key : order) {
    ChartSeries s{.name = one_prompt ? key.first : fmt::format("{} (prompt {})", key.first, key.second)};
    for (const auto& [b, tps] : curves[key]) s.points.emplace_back(b, tps);
    c.series.push_back(std::move(s));
  }
  if (!roof.empty()) {
    ChartSeries s{.name = "weight roofline", .dashed = true};
    for (const auto& [b, tps] : roof) s.points.emplace_back(b, tps);
    c.series.push_back(std::move(s));
  }
  return c;
}

}  // namespace tf::bench
