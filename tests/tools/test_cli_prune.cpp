// `twofold prune` as a user runs it: --help, refusals of bad flags naming the flag, the
// perplexity gate that refuses a cut (non-zero exit, the measured figure, nothing written),
// a cut within the gate written with its per-layer table, and the search for the largest cut
// (also with --score auto on 8 windows: within the limit, and one percent more is not), and
// the greedy allocation.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "tools/cli_util.h"

namespace tf {
namespace {

namespace fs = std::filesystem;
using test::run_twofold;

class CliPrune : public test::TempDirTest {
 protected:
  // tiny-main with 1,024 calibration tokens and 2 evaluation windows: quick, and enough to
  // tell a large cut from a small one.
  std::string base() const {
    return "prune -m " + test::model_dir("tiny-main") + " --calib " + test::source_path("models/calib/gpl-3.txt") +
           " --calib-tokens 1024 --calib-rows 1024 ";
  }
  std::string eval() const { return " --eval " + test::data_path("valid_tokens_65536.bin") + " --max-windows 2 "; }
  std::string out() const { return (dir_ / "out").string(); }
};

TEST_F(CliPrune, HelpNamesTheFlags) {
  const auto r = run_twofold("prune --help");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* flag : {"--heads", "--ffn", "--target-params", "--max-ppl-increase", "--recover", "--score",
                           "--sweep", "--plot", "--calib", "--eval", "--min-keep", "--allocate", "--greedy-step"})
    EXPECT_CONTAINS(r.out, flag);
}

TEST_F(CliPrune, BadFlagsAreRefusedByName) {
  struct Case {
    std::string args, expect;
  };
  const std::vector<Case> cases = {
      {base() + "--heads 10", "-o OUT"},
      {base() + "--heads 10 --target-params 10 -o " + out(), "--target-params"},
      {base() + "--ffn 100 -o " + out(), "--ffn"},
      {base() + "--heads 10 --recover ridge -o " + out(), "--recover"},
      {base() + "--heads 10 --score l2 -o " + out(), "--score"},
      {base() + "-o " + out(), "--max-ppl-increase"},
      {base() + "--max-ppl-increase 5 -o " + out(), "--eval"},
      {base() + "--heads 10 --plot x.svg -o " + out(), "--sweep"},
      {base() + "--sweep 5,ten" + eval(), "--sweep"},
      {base() + "--heads 10 --allocate greedy -o " + out(), "--allocate"},
      {base() + "--target-params 10 --allocate loss -o " + out(), "--allocate"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const auto r = run_twofold(c.args);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_CONTAINS(r.err, c.expect);
    EXPECT_FALSE(fs::exists(out()));
  }
}

TEST_F(CliPrune, ACutPastTheLimitIsRefusedAndNothingWritten) {
  const auto r = run_twofold(base() + "--target-params 40 --recover none --score flap --max-ppl-increase 1" + eval() +
                             "-o " + out());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.err, "over --max-ppl-increase 1%");
  EXPECT_CONTAINS(r.err, "nothing written");
  EXPECT_CONTAINS(r.err, "%) with this cut");
  EXPECT_FALSE(fs::exists(out()));
}

TEST_F(CliPrune, ACutWithinTheLimitIsWrittenWithItsTable) {
  const auto r = run_twofold(base() + "--heads 9 --recover none --score flap --max-ppl-increase 50" + eval() + "-o " +
                             out());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "query heads");
  EXPECT_CONTAINS(r.out, "2 / 4");  // one layer keeps one head per KV group
  EXPECT_CONTAINS(r.out, "perplexity on");
  const auto cfg = test::load_json(out() + "/config.json");
  int64_t heads = 0;
  for (const auto& h : cfg.at("layer_num_attention_heads")) heads += h.get<int64_t>();
  EXPECT_EQ(heads, 22);
  EXPECT_TRUE(fs::exists(out() + "/tokenizer.json"));
}

TEST_F(CliPrune, AloneTheLimitSearchesTheLargestCut) {
  const auto r = run_twofold(base() + "--recover none --score flap --max-ppl-increase 10" + eval() + "-o " + out());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "largest cut within the limit: --target-params");
  EXPECT_TRUE(fs::exists(out() + "/model.safetensors"));
}

// --score auto (both scores built, the better on the held-out tail of the calibration text)
// with the search, on 8 windows: the cut found stays within the limit, its score is named,
// and the next whole percent, cut the same way, is refused.
TEST_F(CliPrune, AutoScoreSearchFindsTheLargestCutOnEightWindows) {
  const std::string common = "prune -m " + test::model_dir("tiny-main") + " --calib " +
                             test::source_path("models/calib/gpl-3.txt") + " --calib-tokens 2048 --calib-rows 2048" +
                             " --score auto --recover lsq --threads 2 --eval " +
                             test::data_path("valid_tokens_65536.bin") + " --max-windows 8 --max-ppl-increase 12 ";
  const auto r = run_twofold(common + "-o " + out());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("score (wanda|flap), recovery lsq, largest cut within the limit: "
                                                     "--target-params ([0-9]+)")))
      << r.out;
  const int found = std::stoi(m[2].str());
  EXPECT_GT(found, 0);
  std::smatch p;
  ASSERT_TRUE(std::regex_search(r.out, p, std::regex(R"(: ([0-9.]+) -> ([0-9.]+) \(\+([0-9.]+)%\))"))) << r.out;
  EXPECT_LE(std::stod(p[3].str()), 12.0);
  EXPECT_GT(std::stod(p[2].str()), std::stod(p[1].str()));
  EXPECT_TRUE(fs::exists(out() + "/model.safetensors"));

  const std::string next = (dir_ / "next").string();
  const auto r2 = run_twofold(common + "--target-params " + std::to_string(found + 1) + " -o " + next);
  EXPECT_EQ(r2.exit_code, 1) << r2.out;
  EXPECT_CONTAINS(r2.err, "over --max-ppl-increase 12%");
  EXPECT_FALSE(fs::exists(next));
}

// --allocate greedy: the cut grows in steps on the held-out tail of the calibration text,
// each step logged; the cut stays within the target and the cost is printed.
TEST_F(CliPrune, GreedyAllocationStepsWithinTheTarget) {
  const auto r = run_twofold(base() + "--target-params 6 --greedy-step 3 --score wanda --allocate greedy --threads 2" +
                             eval() + "-o " + out());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.err, "held out to choose the score or allocate");
  EXPECT_CONTAINS(r.err, "greedy wanda 6%: layer ");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(allocation greedy: ([0-9]+) loss evaluations)"))) << r.out;
  EXPECT_GT(std::stoi(m[1].str()), 12);  // the unpruned model and at least one candidate per layer
  std::smatch p;
  ASSERT_TRUE(std::regex_search(r.out, p, std::regex(R"(removed ([0-9.]+)% of the layers' parameters)"))) << r.out;
  EXPECT_LE(std::stod(p[1].str()), 6.0);
  EXPECT_GT(std::stod(p[1].str()), 3.0);
  EXPECT_TRUE(fs::exists(out() + "/model.safetensors"));
}

}  // namespace
}  // namespace tf
