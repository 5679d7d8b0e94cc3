// OutputFormat::JsonObject through the engine on tiny-main (a model that never saw JSON): every
// output is a prefix of a JSON object, complete and parsed by nlohmann-json whenever it
// ended with EOS; a request beside it is untouched; speculative decoding keeps it lossless.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <regex>

#include "core/error.h"
#include "model/tokenizer/tokenizer.h"
#include "sample/json_machine.h"
#include "test_util.h"
#include "tiny_engine_suite.h"
#include "twofold/engine.h"

namespace tf {
namespace {

const std::string kTiny = test::model_dir("tiny-main");

struct Out {
  std::string text;
  std::vector<int32_t> ids;
  FinishReason why = FinishReason::None;
};

std::vector<Out> run(Engine& e, const std::vector<GenerateRequest>& reqs) {
  std::vector<RequestId> ids;
  for (const GenerateRequest& r : reqs) ids.push_back(e.add_request(r));
  std::vector<Out> out(reqs.size());
  while (e.has_unfinished())
    for (const RequestOutput& o : e.step())
      for (size_t i = 0; i < ids.size(); ++i)
        if (o.id == ids[i]) {
          out[i].text += o.text;
          if (o.finished) out[i].why = o.finish_reason;
        }
  for (size_t i = 0; i < ids.size(); ++i) {
    out[i].ids = e.output_ids(ids[i]);
    e.release(ids[i]);
  }
  return out;
}

GenerateRequest json_request(uint64_t seed, float temperature, int32_t max_tokens = 160) {
  return {.prompt = "Describe the king as a JSON object:",
          .sampling = {.temperature = temperature, .seed = seed, .max_tokens = max_tokens,
                       .output_format = OutputFormat::JsonObject}};
}

// The text is a prefix of a JSON object; when it ended with EOS, a whole one.
void expect_json(const Out& o) {
  SCOPED_TRACE(o.text);
  JsonMachine m;
  ASSERT_TRUE(m.feed(o.text)) << "not a prefix of a JSON object";
  if (o.why == FinishReason::Stop) {
    EXPECT_TRUE(m.complete());
    ASSERT_TRUE(nlohmann::json::accept(o.text));
    EXPECT_TRUE(nlohmann::json::parse(o.text).is_object());
  } else {
    EXPECT_EQ(o.why, FinishReason::Length);
  }
}

class JsonOutput : public test::TinyEngineSuite {};

TEST_F(JsonOutput, GreedyAndSampledOutputsAreJsonObjects) {
  std::vector<GenerateRequest> reqs{json_request(0, 0.0f)};
  for (uint64_t seed = 1; seed <= 8; ++seed) reqs.push_back(json_request(seed, 1.0f));
  const std::vector<Out> outs = run(*engine_, reqs);
  int n_complete = 0;
  for (const Out& o : outs) {
    expect_json(o);
    n_complete += o.why == FinishReason::Stop;
  }
  std::printf("tiny-main: %d of %zu outputs closed their object within 160 tokens; greedy: %s\n", n_complete,
              outs.size(), outs[0].text.c_str());
  EXPECT_EQ(outs[0].text.front(), '{');
}

// Favouring the closing bytes (logit_bias) makes the objects end: each then parses.
TEST_F(JsonOutput, ObjectsThatEndParse) {
  std::vector<GenerateRequest> reqs;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    GenerateRequest r = json_request(seed, 1.0f, 400);
    for (const char* closer : {"}", "\"", "\",", "\"}"}) {
      const std::vector<int32_t> ids = engine_->tokenizer().encode(closer, /*add_special=*/false);
      for (int32_t id : ids) r.sampling.logit_bias.emplace_back(id, 6.0f);
    }
    reqs.push_back(r);
  }
  for (const Out& o : run(*engine_, reqs)) {
    EXPECT_EQ(o.why, FinishReason::Stop) << o.text;
    expect_json(o);
  }
}

// A text request batched with JSON ones gives what it gives alone.
TEST_F(JsonOutput, RequestBesideItIsUntouched) {
  const GenerateRequest text{.prompt = "The LORD is my shepherd;", .sampling = {.temperature = 0, .max_tokens = 24}};
  const std::vector<Out> alone = run(*engine_, {text});
  const std::vector<Out> beside = run(*engine_, {json_request(3, 1.0f), text, json_request(0, 0.0f)});
  EXPECT_EQ(beside[1].ids, alone[0].ids);
  expect_json(beside[0]);
  expect_json(beside[2]);
}

const char* kSchema = R"({"type": "object", "properties": {
    "name": {"enum": ["Ada", "Bob", "Cy"]}, "age": {"type": "integer"}, "ok": {"type": "boolean"},
    "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3}, "note": {"type": ["string", "null"]}},
  "required": ["name", "age", "ok", "tags", "note"]})";

// OutputFormat::JsonSchema: every output that ends is an object with the schema's keys in order
// and values of its types (checked here on the parsed value, apart from the machine).
TEST_F(JsonOutput, SchemaOutputsFollowTheSchema) {
  std::vector<GenerateRequest> reqs;
  for (uint64_t seed = 0; seed < 6; ++seed) {
    GenerateRequest r = json_request(seed, seed == 0 ? 0.0f : 1.0f, 200);
    r.sampling.output_format = OutputFormat::JsonSchema;
    r.sampling.json_schema = kSchema;
    for (int32_t id : engine_->tokenizer().encode("\"", /*add_special=*/false)) r.sampling.logit_bias.emplace_back(id, 4.0f);
    reqs.push_back(r);
  }
  for (const Out& o : run(*engine_, reqs)) {
    SCOPED_TRACE(o.text);
    ASSERT_EQ(o.why, FinishReason::Stop);
    const nlohmann::ordered_json v = nlohmann::ordered_json::parse(o.text);
    std::vector<std::string> keys;
    for (const auto& [k, x] : v.items()) keys.push_back(k);
    EXPECT_EQ(keys, (std::vector<std::string>{"name", "age", "ok", "tags", "note"}));
    EXPECT_TRUE(v["name"] == "Ada" || v["name"] == "Bob" || v["name"] == "Cy");
    EXPECT_TRUE(v["age"].is_number_integer());
    EXPECT_TRUE(v["ok"].is_boolean());
    ASSERT_TRUE(v["tags"].is_array());
    EXPECT_LE(v["tags"].size(), 3u);
    for (const auto& t : v["tags"]) EXPECT_TRUE(t == "a" || t == "b");
    EXPECT_TRUE(v["note"].is_string() || v["note"].is_null());
  }
}

TEST_F(JsonOutput, SchemaOutsideTheSubsetIsRefused) {
  GenerateRequest r = json_request(0, 0.0f);
  r.sampling.output_format = OutputFormat::JsonSchema;
  r.sampling.json_schema = R"({"type": "object", "properties": {"d": {"type": "string", "format": "uri"}}})";
  try {
    engine_->add_request(r);
    FAIL() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("json_schema: 'format' at '#/properties/d'"), std::string::npos) << e.what();
  }
}

TEST_F(JsonOutput, IgnoreEosIsRefused) {
  GenerateRequest r = json_request(0, 0.0f);
  r.sampling.ignore_eos = true;
  EXPECT_THROW(engine_->add_request(r), Error);
}

// Speculation (prompt lookup, and the draft model) proposes for constrained requests too; each
// verified row is masked with the constraint after the proposals before it, so a proposal it
// refuses is rejected there. Greedy ids equal those without speculation (JSON object, schema,
// regex), sampled outputs keep their format, and proposals were made and accepted.
TEST(JsonOutputSpec, SpeculationKeepsGreedyIdsAndFormats) {
  Engine plain(EngineOptions{.model_dir = kTiny});
  std::vector<GenerateRequest> reqs{json_request(0, 0.0f), json_request(5, 1.0f)};
  for (float temperature : {0.0f, 1.0f}) {
    GenerateRequest r = json_request(7, temperature, 200);
    r.sampling.output_format = OutputFormat::JsonSchema;
    r.sampling.json_schema = kSchema;
    for (int32_t id : plain.tokenizer().encode("\"", /*add_special=*/false)) r.sampling.logit_bias.emplace_back(id, 4.0f);
    reqs.push_back(r);
  }
  reqs.push_back({.prompt = "And the king said unto",
                  .sampling = {.temperature = 0, .max_tokens = 40, .output_format = OutputFormat::Regex,
                               .regex = "( the [a-z]+){1,3}(, and| of)( the [a-z]+){1,4}\\."}});
  const std::vector<Out> a = run(plain, reqs);
  for (const std::string method : {"ngram", "draft"}) {
    SCOPED_TRACE(method);
    Engine spec(EngineOptions{.model_dir = kTiny,
                              .spec = {.method = method, .draft_model_dir = test::model_dir("tiny-draft"), .adaptive = false}});
    const std::vector<Out> b = run(spec, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) {
      SCOPED_TRACE(b[i].text);
      if (reqs[i].sampling.greedy()) {
        EXPECT_EQ(a[i].ids, b[i].ids) << i;
      }
      if (reqs[i].sampling.output_format == OutputFormat::JsonObject) expect_json(b[i]);
      if (reqs[i].sampling.output_format == OutputFormat::JsonSchema) {
        ASSERT_EQ(b[i].why, FinishReason::Stop);
        EXPECT_EQ(nlohmann::json::parse(b[i].text).size(), 5u);
      }
    }
    const EngineMetrics m = spec.metrics();
    EXPECT_GT(m.spec_drafts, 0);
    EXPECT_GT(m.spec_accepted_tokens, 0);
    std::printf("%s: %lld proposals, %lld tokens accepted\n", method.c_str(), (long long)m.spec_draft_tokens,
                (long long)m.spec_accepted_tokens);
  }
  EXPECT_TRUE(std::regex_match(a.back().text, std::regex("( the [a-z]+){1,3}(, and| of)( the [a-z]+){1,4}\\.")))
      << a.back().text;
}

}  // namespace
}  // namespace tf
