// `--tp N` on the verbs that run the engine, on the CPU (N rank threads, in-process
// communicator): the same greedy ids and logits as TP = 1, and a size that does not split
// the model is a user error naming the dimension.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/golden_util.h"
#include "tools/cli_util.h"

namespace tf {
namespace {

using nlohmann::json;
using test::run_twofold;
using test::shell_quote;

const std::string kTiny = test::model_dir("tiny-main");

TEST(CliParallel, GenerateTp2GreedyEqualsGolden) {
  const auto g = test::load_golden("tiny-main")[1];
  const auto r = run_twofold("generate -m " + kTiny + " --tp 2 -p " + shell_quote(g.text) + " -n " +
                             std::to_string(g.greedy_ids.size()) + " --temp 0 --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), g.input_ids);
  EXPECT_EQ(j["output_ids"].get<std::vector<int32_t>>(), g.greedy_ids);
}

TEST(CliParallel, LogitsTp2EqualTp1) {
  const auto g = test::load_golden("tiny-main")[2];
  const auto one = run_twofold("logits -m " + kTiny + " -p " + shell_quote(g.text));
  const auto two = run_twofold("logits -m " + kTiny + " --tp 2 -p " + shell_quote(g.text));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const json a = json::parse(one.out), b = json::parse(two.out);
  EXPECT_EQ(b["ids"], a["ids"]);
  const auto la = a["logits"].get<std::vector<float>>(), lb = b["logits"].get<std::vector<float>>();
  ASSERT_EQ(lb.size(), la.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    diff = std::max(diff, std::fabs(double(lb[i]) - la[i]));
    scale = std::max(scale, std::fabs(double(la[i])));
  }
  EXPECT_LE(diff / scale, 1e-5);
  EXPECT_LE(test::rel_l2(lb.data(), g.last_logits.data(), lb.size()), 1e-4);
}

TEST(CliParallel, TpThatDoesNotSplitTheModelIsAnError) {
  const auto r = run_twofold("logits -m " + kTiny + " --tp 3 -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tensor parallel size 3 does not divide num_attention_heads = 4"), std::string::npos) << r.err;
  const auto help = run_twofold("generate --help");
  EXPECT_NE(help.out.find("--tp"), std::string::npos);
}

}  // namespace
}  // namespace tf
