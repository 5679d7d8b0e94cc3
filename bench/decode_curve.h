// The decode throughput-vs-batch curve of a `twofold bench --json` result: one series per
// (variant, prompt length) with the decode tokens/s at each batch size, and the weight
// roofline (copy bandwidth x batch / weight bytes) when the run measured the bandwidth.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "bench/svg_chart.h"

namespace tf::bench {

// tf::Error naming what is missing when `bench_output` has no "runs" with "batch" and
// "decode_tokens_per_s".
LineChart decode_curve(const nlohmann::json& bench_output);

}  // namespace tf::bench
