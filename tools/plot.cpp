// `twofold plot`: the decode throughput-vs-batch curve of a saved `twofold bench --json`
// result as an SVG file (bench --plot writes the same chart right after a run).
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "bench/decode_curve.h"
#include "core/error.h"
#include "tools/commands.h"

namespace tf::cli {

void write_decode_curve(const nlohmann::json& bench_output, const std::string& path) {
  const std::string svg = bench::render_svg(bench::decode_curve(bench_output));
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error(fmt::format("plot: cannot open '{}' for writing", path));
  f << svg;
  f.close();
  if (!f) throw Error(fmt::format("plot: writing '{}' failed", path));
  std::fprintf(stderr, "wrote %s\n", path.c_str());
}

void add_plot(CLI::App& app, Runner& run) {
  struct Args {
    std::string input, output = "decode_vs_batch.svg";
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("plot", "Decode tokens/s vs batch of a `twofold bench --json` result, as SVG");
  c->add_option("input", a->input, "JSON file written by `twofold bench --json`")
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("-o,--output", a->output, "SVG file to write")->capture_default_str();
  c->callback([a, &run] {
    run = [a] {
      std::ifstream f(a->input);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(f);
      } catch (const nlohmann::json::exception& e) {
        throw Error(fmt::format("plot: '{}' is not JSON: {}", a->input, e.what()));
      }
      write_decode_curve(j, a->output);
      return 0;
    };
  });
}

}  // namespace tf::cli
