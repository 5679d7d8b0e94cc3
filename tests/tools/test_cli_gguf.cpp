// `-m FILE.gguf` on every verb, run as a user runs them: tiny-main as llama.cpp converted it
// (models/gguf) gives the folder's answers (f16 file) or runs (q8_0 file) on generate, logits,
// tokenize, detokenize, perplexity, info, bench, kv-plan and serve.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include "engine/golden_util.h"
#include "tools/cli_util.h"
#include "tools/serve_process.h"

namespace tf {
namespace {

using nlohmann::json;
using test::run_twofold;
using test::shell_quote;

const std::string kF16 = std::string(TF_GGUF_MODELS_DIR) + "/tiny-main-f16.gguf";
const std::string kQ8 = test::source_path("models/gguf/tiny-main-q8_0.gguf");

TEST(CliGguf, GenerateGreedyMatchesTransformers) {
  const auto g = test::load_golden("tiny-main")[0];
  const auto r = run_twofold("generate -m " + kF16 + " -p " + shell_quote(g.text) + " -n " +
                             std::to_string(g.greedy_ids.size()) + " --temp 0 --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), g.input_ids);
  const auto out = j["output_ids"].get<std::vector<int32_t>>();
  const size_t n = test::greedy_steps_to_compare(g, 1e-3);
  ASSERT_GE(out.size(), n);
  EXPECT_EQ(std::vector<int32_t>(out.begin(), out.begin() + long(n)),
            std::vector<int32_t>(g.greedy_ids.begin(), g.greedy_ids.begin() + long(n)));
}

TEST(CliGguf, LogitsMatchTransformers) {
  test::expect_logits_verb_matches_golden(kF16, 1e-4);
}

TEST(CliGguf, TokenizeAndDetokenize) {
  const auto r = run_twofold("tokenize -m " + kQ8 + " -p 'In the beginning God created'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["ids"], test::load_golden("tiny-main")[0].input_ids);
  const auto d = run_twofold("detokenize -m " + kQ8 + " --ids 908,265,3089,956,1339");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_EQ(d.out, "In the beginning God created\n");
}

TEST(CliGguf, InfoListsTheStoredTypes) {
  const auto r = run_twofold("info -m " + kQ8);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_CONTAINS(r.out, "8031488");  // parameters, as the folder
  EXPECT_CONTAINS(r.out, "GGUF file:");
  EXPECT_CONTAINS(r.out, "stored Q8_0      44 tensors");
  EXPECT_CONTAINS(r.out, "stored F32       13 tensors");
}

TEST(CliGguf, KvPlanFromTheMetadata) {
  const auto r = run_twofold("kv-plan -m " + kQ8 + " --gpu-mem 1 --kv-dtype bf16 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["kv_bytes_per_token"], 3072);
}

TEST(CliGguf, PerplexityEqualsTheFolders) {
  auto ppl = [](const std::string& model) {
    const auto r = run_twofold("perplexity -m " + model + " -f " + test::data_path("valid_tokens_65536.bin") +
                               " --window 256 --max-windows 16 --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out)["ppl"].get<double>();
  };
  const double folder = ppl(test::model_dir("tiny-main")), f16 = ppl(kF16), q8 = ppl(kQ8);
  std::printf("[ ppl ] 16 windows of 256: folder %.4f, f16 file %.4f, q8_0 file %.4f\n", folder, f16, q8);
  EXPECT_LE(std::abs(f16 - folder) / folder, 1e-4);
  EXPECT_LE(std::abs(q8 - folder) / folder, 0.01);
}

TEST(CliGguf, BenchRuns) {
  const auto r = run_twofold("bench -m " + kQ8 + " --batch 1 --prompt-len 16 --gen 8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("decode"), std::string::npos) << r.out;
}

TEST(CliGguf, ServeAnswersACompletion) {
  test::ServeProcess p({}, kQ8);
  EXPECT_GT(p.port(), 0) << p.banner();
  EXPECT_CONTAINS(p.banner(), "model tiny-main-q8_0 (");
  if (p.port() > 0) {
    httplib::Client c("127.0.0.1", p.port());
    c.set_read_timeout(120, 0);
    auto res = c.Post("/v1/completions", json{{"prompt", "In the beginning"}, {"max_tokens", 4}, {"ignore_eos", true}}.dump(),
                      "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    const json body = json::parse(res->body);
    EXPECT_EQ(body["model"], "tiny-main-q8_0");
    EXPECT_EQ(body["usage"]["completion_tokens"], 4);
  }
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 0);
}

TEST(CliGguf, BadFilesAreClearErrors) {
  const auto r = run_twofold("info -m " + test::model_dir("tiny-main") + "/config.json");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.err, "config.json: not a GGUF file");
  const auto t = run_twofold("generate -m " + test::data_path("valid_tokens_65536.bin") + " -p x");
  EXPECT_EQ(t.exit_code, 1);
  EXPECT_CONTAINS(t.err, "not a GGUF file");
}

}  // namespace
}  // namespace tf
