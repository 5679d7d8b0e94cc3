// A folder `twofold prune` wrote, through the other verbs as a user runs them: generate, and
// serve answering a completion.
#include <gtest/gtest.h>
#include <signal.h>

#include "serve/serve_test_util.h"
#include "tools/cli_util.h"
#include "tools/serve_process.h"

namespace tf::test {
namespace {

class PrunedVerbs : public TempDirTest {};

TEST_F(PrunedVerbs, GenerateAndServeLoadAPrunedFolder) {
  const std::string out = (dir_ / "pruned").string();
  const auto p = run_twofold("prune -m " + model_dir("tiny-main") + " --calib " + source_path("models/calib/gpl-3.txt") +
                             " --calib-tokens 1024 --calib-rows 1024 --target-params 20 --recover lsq -o " + out);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  const auto g = run_twofold("generate -m " + out + " -p 'The LORD is my shepherd;' -n 8 --temp 0 --ignore-eos");
  ASSERT_EQ(g.exit_code, 0) << g.err;
  EXPECT_FALSE(g.out.empty());
  ServeProcess s({}, out);
  ASSERT_GT(s.port(), 0) << s.banner();
  httplib::Client c("127.0.0.1", s.port());
  c.set_read_timeout(120, 0);
  const HttpReply r = post(c, "/v1/completions",
                           nlohmann::json{{"prompt", "In the beginning"}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(r.status, 200) << r.text;
  const auto j = nlohmann::json::parse(r.text);
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  s.signal(SIGTERM);
  EXPECT_EQ(s.wait(), 0);
}

}  // namespace
}  // namespace tf::test
