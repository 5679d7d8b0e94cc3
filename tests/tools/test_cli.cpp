// The command-line forms scripts depend on (README.md), run as a user runs them.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "engine/golden_util.h"
#include "sample/json_machine.h"
#include "tools/cli_util.h"

namespace tf {
namespace {

using nlohmann::json;
using test::run_twofold;
using test::shell_quote;

const std::string kTiny = test::model_dir("tiny-main");

TEST(Cli, HelpOnEveryVerb) {
  for (const char* verb : {"", "generate", "logits", "tokenize", "detokenize", "perplexity", "info", "bench", "kv-plan", "serve", "chat"}) {
    const auto r = run_twofold(std::string(verb) + " --help");
    EXPECT_EQ(r.exit_code, 0) << verb;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << verb << ": " << r.out;
  }
}

TEST(Cli, NoVerbIsAnErrorWithUsage) {
  const auto r = run_twofold("");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.signal, 0);
}

TEST(Cli, GenerateJsonGreedyMatchesGolden) {
  const auto golden = test::load_golden("tiny-main");
  for (size_t i = 0; i < 2; ++i) {
    const auto& g = golden[i];
    const auto r = run_twofold("generate -m " + kTiny + " -p " + shell_quote(g.text) + " -n " +
                               std::to_string(g.greedy_ids.size()) + " --temp 0 --ignore-eos --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), g.input_ids);
    EXPECT_EQ(j["output_ids"].get<std::vector<int32_t>>(), g.greedy_ids);
    const auto full = test::load_json(test::data_path("golden-tiny-main.json"));
    EXPECT_EQ(j["text"].get<std::string>(), full["prompts"][i]["greedy"]["text"].get<std::string>());
    EXPECT_NE(r.err.find("decode"), std::string::npos) << "tokens/s report on stderr";
  }
}

// --json-object: the text is (the start of) one JSON object; it cannot go past EOS.
TEST(Cli, GenerateJsonObject) {
  const auto r = run_twofold("generate -m " + kTiny + " -p 'The king said' -n 80 --temp 0 --json-object --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  const std::string text = j["text"].get<std::string>();
  JsonMachine m;
  EXPECT_TRUE(m.feed(text)) << text;
  EXPECT_EQ(text.front(), '{');
  const auto bad = run_twofold("generate -m " + kTiny + " -p 'The king said' -n 8 --json-object --ignore-eos");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("ignore_eos"), std::string::npos) << bad.err;
}

// --json-schema / --json-schema-file: sampled outputs that end are values of the schema (a date
// format, an integer range, an optional property); a schema outside the subset names the flag.
TEST(Cli, GenerateJsonSchema) {
  const std::string schema = R"({"type": "object", "properties": {"age": {"type": "integer", "minimum": 18,
      "maximum": 99}, "born": {"type": "string", "format": "date"}, "city": {"enum": ["Oslo", "Rome"]}},
      "required": ["age", "born"]})";
  const std::string file = ::testing::TempDir() + "/cli_schema.json";
  {
    std::ofstream(file) << schema;
  }
  for (int seed = 0; seed < 3; ++seed) {
    const std::string flag = seed == 0 ? "--json-schema " + shell_quote(schema) : "--json-schema-file " + file;
    const auto r = run_twofold("generate -m " + kTiny + " -p 'The king said' -n 120 --temp 1 --json --seed " +
                               std::to_string(seed) + " " + flag);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string text = json::parse(r.out)["text"].get<std::string>();
    SCOPED_TRACE(text);
    ASSERT_TRUE(json::accept(text));
    const json v = json::parse(text);
    EXPECT_GE(v["age"].get<int>(), 18);
    EXPECT_LE(v["age"].get<int>(), 99);
    EXPECT_EQ(v["born"].get<std::string>().size(), 10u);
    EXPECT_LE(v.size(), 3u);
  }
  const auto bad = run_twofold("generate -m " + kTiny +
                               R"( -p x --json-schema '{"type": "object", "properties": {"u": {"type": "string", "format": "uri"}}}')");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--json-schema: 'format' at '#/properties/u'"), std::string::npos) << bad.err;
  const auto both = run_twofold("generate -m " + kTiny + " -p x --json-object --json-schema '{}'");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("excludes"), std::string::npos) << both.err;
}

TEST(Cli, GenerateStreamsTextToStdout) {
  const auto g = test::load_golden("tiny-main")[0];
  const auto r = run_twofold("generate -m " + kTiny + " -p " + shell_quote(g.text) + " -n 32 --temp 0 --ignore-eos");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto full = test::load_json(test::data_path("golden-tiny-main.json"));
  EXPECT_EQ(r.out, full["prompts"][0]["greedy"]["text"].get<std::string>() + "\n");
}

TEST(Cli, SameSeedSameOutputDifferentSeedDiffers) {
  auto gen = [](int seed) {
    const auto r = run_twofold("generate -m " + kTiny + " -p 'The SQL standard' -n 24 --temp 1.0 --top-p 0.95 --ignore-eos --json --seed " +
                               std::to_string(seed));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out)["output_ids"].get<std::vector<int32_t>>();
  };
  EXPECT_EQ(gen(7), gen(7));
  EXPECT_NE(gen(7), gen(8));
}

TEST(Cli, StopStringEndsGeneration) {
  // Greedy continuation of bible_short is " the LORD, and the LORD had given him.\n..."
  const auto r = run_twofold("generate -m " + kTiny + " -p 'In the beginning God created' -n 32 --temp 0 --json --stop ' had'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["text"], " the LORD, and the LORD");
  EXPECT_EQ(j["finish_reason"], "stop");
}

// --logit-bias ID=BIAS (repeatable) and a prompts-file line's "logit_bias": -100 keeps a token
// out of greedy output, +100 forces it; malformed values name the flag.
TEST(Cli, LogitBiasBansAndForcesTokens) {
  const auto g = test::load_golden("tiny-main")[0];
  const std::string base = "generate -m " + kTiny + " -p " + shell_quote(g.text) + " -n 8 --temp 0 --ignore-eos --json";
  auto ids = [](const test::CliResult& r) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out)["output_ids"].get<std::vector<int32_t>>();
  };
  const std::vector<int32_t> plain(g.greedy_ids.begin(), g.greedy_ids.begin() + 8);
  ASSERT_EQ(ids(run_twofold(base)), plain);
  const int32_t banned = plain[0], second = plain[1];
  const auto without = ids(run_twofold(base + " --logit-bias " + std::to_string(banned) + "=-100 --logit-bias " +
                                       std::to_string(second) + "=-100"));
  EXPECT_NE(without, plain);
  for (int32_t id : without) EXPECT_TRUE(id != banned && id != second) << id;
  const auto forced = ids(run_twofold(base + " --logit-bias 7=100"));
  EXPECT_EQ(forced, std::vector<int32_t>(8, 7));

  const auto path = std::filesystem::temp_directory_path() / "twofold_bias_prompts.jsonl";
  {
    std::ofstream f(path);
    f << json{{"prompt", g.text}, {"max_tokens", 8}, {"temperature", 0},
              {"logit_bias", {{std::to_string(banned), -100}, {std::to_string(second), -100}}}}.dump() << "\n";
  }
  const auto lines = run_twofold("generate -m " + kTiny + " --prompts-file " + path.string() + " --ignore-eos --json");
  EXPECT_EQ(ids(lines), without);
  std::filesystem::remove(path);

  for (const char* bad : {"5", "5=", "x=1", "5=1x", "-1=2", "5=101"}) {
    const auto r = run_twofold(base + " --logit-bias=" + bad);
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_NE(r.err.find("--logit-bias"), std::string::npos) << bad << ": " << r.err;
  }
}

TEST(Cli, LogitsMatchGolden) {
  test::expect_logits_verb_matches_golden(kTiny, 1e-4);
}

TEST(Cli, TokenizeAndDetokenize) {
  const auto full = test::load_json(test::data_path("golden-tiny-main.json"));
  for (const auto& c : full["tokenizer_cases"]) {
    const std::string text = c["text"];
    if (text.empty() || text.find('\0') != std::string::npos) continue;  // not expressible as an argv string
    const auto r = run_twofold("tokenize -m " + kTiny + " -p " + shell_quote(text));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto ids = json::parse(r.out)["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(ids, c["ids"].get<std::vector<int32_t>>()) << text;
    std::string list;
    for (int32_t id : ids) {
      if (!list.empty()) list += ',';
      list += std::to_string(id);
    }
    const auto d = run_twofold("detokenize -m " + kTiny + " --ids " + list);
    ASSERT_EQ(d.exit_code, 0) << d.err;
    EXPECT_EQ(d.out, text + "\n");
  }
}

TEST(Cli, DetokenizeRejectsBadIds) {
  for (const char* ids : {"1,x,3", "99999", "-4"}) {
    const auto r = run_twofold("detokenize -m " + kTiny + " --ids " + shell_quote(ids));
    EXPECT_EQ(r.exit_code, 1) << ids;
    EXPECT_NE(r.err.find("--ids"), std::string::npos) << r.err;
  }
}

TEST(Cli, InfoDescribesTheModel) {
  const auto r = run_twofold("info -m " + kTiny);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("llama"), std::string::npos);
  EXPECT_NE(r.out.find("8031488"), std::string::npos) << r.out;   // parameters (models README)
  EXPECT_NE(r.out.find("16062976"), std::string::npos) << r.out;  // bytes of BF16 weights
  EXPECT_NE(r.out.find("GQA"), std::string::npos);
  // 6 layers x 2 kv heads x 64 x 2 (K and V) x 2 bytes
  EXPECT_NE(r.out.find("3072 (bf16/f16)"), std::string::npos) << r.out;
}

// Gemma 3's mixed layers and the experts of Mixtral, as info and kv-plan show them.
TEST(Cli, InfoAndKvPlanOfMixedAndExpertModels) {
  const std::string gemma = test::model_dir("parity/gemma3"), mixtral = test::model_dir("parity/mixtral");
  const auto gi = run_twofold("info -m " + gemma);
  EXPECT_EQ(gi.exit_code, 0) << gi.err;
  EXPECT_NE(gi.out.find("4 (3 sliding-window, 1 full attention)"), std::string::npos) << gi.out;
  EXPECT_NE(gi.out.find("sliding-window layers 10000"), std::string::npos) << gi.out;
  const auto mi = run_twofold("info -m " + mixtral);
  EXPECT_EQ(mi.exit_code, 0) << mi.err;
  EXPECT_NE(mi.out.find("4 per layer in 4 of 4 layers, top 2 per token, d_ff 128 each"), std::string::npos) << mi.out;
  // Gemma: only the full layer keeps the context: 1 x 2 KV heads x 2 x 32 x 2 bytes = 256 per
  // token; each of the 3 sliding layers at most 2 blocks of 16 (window 16) per sequence.
  const auto r = run_twofold("kv-plan -m " + gemma + " --gpu-mem 1 --kv-dtype bf16 --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const json plan = json::parse(r.out);
  EXPECT_EQ(plan["kv_bytes_per_token"], 256);
  EXPECT_EQ(plan["sliding_window_layers"], 3);
  EXPECT_EQ(plan["sliding_window_bytes_per_sequence"], 3 * 2 * 16 * 256);
  EXPECT_EQ(plan["kv_bytes_per_sequence"], 512 * 256 + 3 * 2 * 16 * 256);
}

TEST(Cli, KvPlanFormula) {
  // tiny-main: 6 layers x 2 KV heads x 2 (K, V) x 64 x 2 bytes = 3072 bytes per token in BF16;
  // INT8 rows carry a 4-byte scale: 6 x 2 x 2 x (64 + 4) = 1632.
  auto plan = [](const std::string& dtype) {
    const auto r = run_twofold("kv-plan -m " + kTiny + " --gpu-mem 1 --kv-dtype " + dtype + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return json::parse(r.out);
  };
  const json bf16 = plan("bf16"), i8 = plan("int8");
  EXPECT_EQ(bf16["kv_bytes_per_token"], 3072);
  EXPECT_EQ(i8["kv_bytes_per_token"], 1632);
  EXPECT_EQ(bf16["kv_bytes_per_sequence"], 1024 * 3072);
  EXPECT_EQ(bf16["weight_bytes"], 8031488 * 2);
  // Sequences that fit = floor(budget / bytes per sequence), and INT8 fits more.
  EXPECT_EQ(bf16["max_sequences"], bf16["kv_budget_bytes"].get<int64_t>() / (1024 * 3072));
  EXPECT_GT(i8["max_sequences"].get<int64_t>(), bf16["max_sequences"].get<int64_t>());
  const auto bad = run_twofold("kv-plan -m " + kTiny + " --kv-dtype int4");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("--kv-dtype"), std::string::npos) << bad.err;
}

TEST(Cli, DummyWeightsFromConfigAlone) {
  // `--load-format dummy`: a folder with config.json and a tokenizer but no safetensors.
  const auto dir = std::filesystem::temp_directory_path() / ("twofold_dummy_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(kTiny + "/" + f, dir / f, std::filesystem::copy_options::overwrite_existing);
  const auto without = run_twofold("generate -m " + dir.string() + " -p 'Hello' -n 4 --temp 0");
  EXPECT_EQ(without.exit_code, 1) << "no safetensors and no dummy: a clear error";
  const auto r = run_twofold("generate -m " + dir.string() + " --load-format dummy -p 'Hello' -n 6 --temp 0 --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["output_ids"].size(), 6u);
  const auto again = run_twofold("generate -m " + dir.string() + " --load-format dummy -p 'Hello' -n 6 --temp 0 --ignore-eos --json");
  EXPECT_EQ(json::parse(again.out)["output_ids"], json::parse(r.out)["output_ids"]) << "same seed, same weights";
  std::filesystem::remove_all(dir);
}

TEST(Cli, PromptsFileRunsConcurrentlyInInputOrder) {
  const auto golden = test::load_golden("tiny-main");
  const auto path = std::filesystem::temp_directory_path() / "twofold_prompts.jsonl";
  {
    std::ofstream f(path);
    for (size_t i = 0; i < 4; ++i)
      f << json{{"prompt", golden[i].text}, {"max_tokens", 8 + int(i)}, {"temperature", 0}}.dump() << "\n";
  }
  const auto r = run_twofold("generate -m " + kTiny + " --prompts-file " + path.string() + " --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::stringstream ss(r.out);
  std::string line;
  size_t i = 0;
  for (; std::getline(ss, line); ++i) {
    const json j = json::parse(line);
    ASSERT_LT(i, 4u);
    EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), golden[i].input_ids);
    const auto out = j["output_ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(out.size(), 8 + i);
    EXPECT_TRUE(std::equal(out.begin(), out.end(), golden[i].greedy_ids.begin())) << "request " << i;
    EXPECT_TRUE(j.contains("ttft_s") && j.contains("tokens_per_s"));
  }
  EXPECT_EQ(i, 4u);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tf
