// `twofold perplexity` over tiny-main's validation stream against transformers' figure. Its
// own executable so that it can carry the no_sanitizer label: 65,280 tokens of forward passes
// take about 30 s here and more than 15 minutes under ASan, and what it checks is a number.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "tools/cli_util.h"

namespace tf {
namespace {

using nlohmann::json;
using test::run_twofold;

// The validation stream of models/README.md ("Perplexity") as windows of 256 tokens; the
// figure there (float32 transformers) is 23.1755.
TEST(Cli, PerplexityMatchesReference) {
  const auto r = run_twofold("perplexity -m " + test::model_dir("tiny-main") + " -f " +
                             test::data_path("valid_tokens_65536.bin") + " --window 256 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["tokens"], 65280);
  const double ppl = j["ppl"];
  std::printf("[ ppl ] tiny-main %.4f (reference 23.1755)\n", ppl);
  EXPECT_LE(std::abs(ppl - 23.1755) / 23.1755, 0.005);
}

}  // namespace
}  // namespace tf
