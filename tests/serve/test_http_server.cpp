// The HTTP server in-process over loopback with the tiny model: response shapes of both
// endpoints (streamed and not), greedy output equal to the engine's, every error case
// (400 naming the field, 404, 405, 413, 429 with Retry-After, 401), a client hanging up
// mid-stream (its request aborted, its KV blocks freed), and the graceful drain. Hostile
// clients and limits: test_http_limits.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <regex>
#include <set>

#include "model/config.h"
#include "model/tokenizer/tokenizer.h"
#include "sample/json_machine.h"
#include "serve_test_util.h"

namespace tf::test {
namespace {

using nlohmann::json;

const std::string kPrompt = "The LORD is my shepherd;";

struct StreamReply {
  int status = 0;
  std::string text;  // the raw SSE body received
};

// A streaming POST; keep_going(received so far) returning false hangs up.
StreamReply post_stream(httplib::Client& c, const std::string& path, const std::string& body,
                        std::function<bool(const std::string&)> keep_going = nullptr) {
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  StreamReply r;
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    r.text.append(d, n);
    return keep_going ? keep_going(r.text) : true;
  };
  auto res = c.send(req);
  if (res) r.status = res->status;
  return r;
}

StreamReply post_stream(httplib::Client& c, const std::string& path, const json& body,
                        std::function<bool(const std::string&)> keep_going = nullptr) {
  return post_stream(c, path, body.dump(), std::move(keep_going));
}

// `body` sent streamed (with the usage chunk when `usage`); the events, or none (a failure
// recorded) when the reply was not a 200 stream ending in [DONE].
std::vector<json> stream_events(httplib::Client& c, const std::string& path, json body, bool usage) {
  body["stream"] = true;
  if (usage) body["stream_options"] = {{"include_usage", true}};
  const StreamReply st = post_stream(c, path, body);
  EXPECT_EQ(st.status, 200) << st.text;
  bool done = false;
  std::vector<json> events = parse_sse(st.text, &done);
  EXPECT_TRUE(done);
  return st.status == 200 && done ? events : std::vector<json>{};
}

// What the engine alone produces for the prompt, greedy.
std::string engine_greedy(const std::string& prompt, int32_t n, bool add_special = true) {
  Engine e(EngineOptions{.model_dir = kTinyModel});
  GenerateRequest req{.sampling = {.temperature = 0, .max_tokens = n, .ignore_eos = true}};
  if (add_special) req.prompt = prompt;
  else req.prompt_ids = e.tokenizer().encode(prompt, false);
  e.add_request(req);
  std::string text;
  while (e.has_unfinished())
    for (const RequestOutput& o : e.step()) text += o.text;
  return text;
}

void expect_error(const HttpReply& r, int status, const json& param, const std::string& code = "") {
  EXPECT_EQ(r.status, status) << r.text;
  ASSERT_TRUE(r.body.contains("error")) << r.text;
  const json& e = r.body["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.text;
  EXPECT_TRUE(e["type"].is_string()) << r.text;
  EXPECT_EQ(e["param"], param) << r.text;
  EXPECT_TRUE(e.contains("code")) << r.text;
  if (!code.empty()) {
    EXPECT_EQ(e["code"], code) << r.text;
  }
}

class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new TestServer(serve::ServerOptions{.max_body_bytes = 64 * 1024}); }
  static void TearDownTestSuite() { delete server_; }
  static TestServer* server_;
};
TestServer* Serve::server_ = nullptr;

TEST_F(Serve, CompletionShapeAndGreedyOutputEqualsTheEngine) {
  auto c = server_->client();
  const HttpReply r = post(c, "/v1/completions",
                           json{{"model", "tiny-main"}, {"prompt", kPrompt}, {"max_tokens", 12},
                                {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.body["object"], "text_completion");
  EXPECT_EQ(r.body["model"], "tiny-main");
  EXPECT_EQ(r.body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_TRUE(r.body["created"].is_number_integer());
  ASSERT_EQ(r.body["choices"].size(), 1u);
  const json& ch = r.body["choices"][0];
  EXPECT_EQ(ch["index"], 0);
  EXPECT_EQ(ch["finish_reason"], "length");
  EXPECT_TRUE(ch["logprobs"].is_null());
  EXPECT_EQ(ch["text"], engine_greedy(kPrompt, 12));
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 12);
  EXPECT_GT(r.body["usage"]["prompt_tokens"].get<int>(), 0);
  EXPECT_EQ(r.body["usage"]["total_tokens"].get<int>(),
            r.body["usage"]["prompt_tokens"].get<int>() + 12);
  EXPECT_TRUE(r.body["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());
  EXPECT_FALSE(r.body["usage"].contains("completion_tokens_details"));  // chat only
}

// usage.prompt_tokens_details.cached_tokens: the prompt's full blocks that the prefix cache
// held, none the first time a prompt is seen, whole blocks the second.
TEST(ServeUsage, CachedTokensCountPrefixCacheHits) {
  TestServer s(serve::ServerOptions{}, EngineOptions{.block_size = 16});
  auto c = s.client();
  std::string prompt;
  for (int i = 0; i < 12; ++i) prompt += "The LORD is my shepherd; I shall not want. ";
  const json body{{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}};
  const HttpReply first = post(c, "/v1/completions", body);
  ASSERT_EQ(first.status, 200) << first.text;
  const int n_prompt = first.body["usage"]["prompt_tokens"];
  ASSERT_GT(n_prompt, 64);
  EXPECT_EQ(first.body["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const HttpReply second = post(c, "/v1/completions", body);
  ASSERT_EQ(second.status, 200) << second.text;
  const int cached = second.body["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GT(cached, n_prompt - 2 * 16);  // every full block but the one that holds the last token
  EXPECT_LT(cached, n_prompt);
  EXPECT_EQ(cached % 16, 0);
  // Streamed, the usage chunk says the same.
  const std::vector<json> events = stream_events(c, "/v1/completions", body, /*usage=*/true);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["usage"]["prompt_tokens_details"]["cached_tokens"], cached);
}

TEST_F(Serve, StreamedCompletionEqualsTheWholeOneAndEndsWithDone) {
  auto c = server_->client();
  const json body{{"prompt", kPrompt}, {"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true},
                  {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  const StreamReply s = post_stream(c, "/v1/completions", body);
  ASSERT_EQ(s.status, 200);
  bool done = false;
  const std::vector<json> events = parse_sse(s.text, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 3u);
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    EXPECT_EQ(events[i]["object"], "text_completion");
    ASSERT_EQ(events[i]["choices"].size(), 1u);
    EXPECT_TRUE(events[i]["usage"].is_null());
    text += events[i]["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "length");
  const json& last = events.back();  // the usage chunk
  EXPECT_TRUE(last["choices"].empty());
  EXPECT_EQ(last["usage"]["completion_tokens"], 10);
  EXPECT_EQ(text, engine_greedy(kPrompt, 10));
}

TEST_F(Serve, CompletionLogprobs) {
  auto c = server_->client();
  const HttpReply r = post(c, "/v1/completions",
                           json{{"prompt", kPrompt}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 2},
                                {"ignore_eos", true}});
  ASSERT_EQ(r.status, 200) << r.text;
  const json& lp = r.body["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 4u);
  ASSERT_EQ(lp["token_logprobs"].size(), 4u);
  ASSERT_EQ(lp["top_logprobs"].size(), 4u);
  ASSERT_EQ(lp["text_offset"].size(), 4u);
  std::string joined;
  for (size_t i = 0; i < 4; ++i) {
    const double l = lp["token_logprobs"][i];
    EXPECT_LE(l, 0.0);
    EXPECT_GE(lp["top_logprobs"][i].size(), 1u);
    // Greedy: the sampled token is the most likely one.
    double best = -1e30;
    for (const auto& [tok, v] : lp["top_logprobs"][i].items()) best = std::max(best, v.get<double>());
    EXPECT_DOUBLE_EQ(best, l);
    EXPECT_EQ(lp["text_offset"][i], joined.size());
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, r.body["choices"][0]["text"]);
}

// echo: the prompt before the output; with logprobs, its tokens' logprobs (the first null),
// each log softmax of the engine's own scores at that position; max_tokens 0 scores the
// prompt only (how evaluation harnesses ask for loglikelihoods). Streamed, the prompt is the
// first chunk.
TEST_F(Serve, CompletionEchoWithPromptLogprobs) {
  auto c = server_->client();
  const std::string prompt = "The LORD is my shepherd; I shall not want.";
  Engine ref(EngineOptions{.model_dir = kTinyModel});
  const std::vector<int32_t> ids = ref.tokenizer().encode(prompt);
  const std::vector<float> scores = ref.score(ids, /*all_positions=*/true);
  const size_t n_vocab = size_t(ref.config().n_vocab);
  auto logprob_at = [&](size_t pos, int32_t id) {  // log softmax of row pos at id
    const float* row = scores.data() + pos * n_vocab;
    double m = row[0], sum = 0;
    for (size_t k = 0; k < n_vocab; ++k) m = std::max(m, double(row[k]));
    for (size_t k = 0; k < n_vocab; ++k) sum += std::exp(double(row[k]) - m);
    return double(row[id]) - m - std::log(sum);
  };
  const size_t n = ids.size();
  for (const int max_tokens : {3, 0}) {
    SCOPED_TRACE("max_tokens " + std::to_string(max_tokens));
    const HttpReply r = post(c, "/v1/completions",
                             json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"logprobs", 1},
                                  {"echo", true}, {"ignore_eos", true}});
    ASSERT_EQ(r.status, 200) << r.text;
    const json& ch = r.body["choices"][0];
    EXPECT_EQ(ch["text"], prompt + (max_tokens ? engine_greedy(prompt, max_tokens) : ""));
    EXPECT_EQ(ch["finish_reason"], "length");
    EXPECT_EQ(r.body["usage"]["completion_tokens"], max_tokens);
    const json& lp = ch["logprobs"];
    ASSERT_EQ(lp["tokens"].size(), n + size_t(max_tokens));
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    for (size_t i = 1; i < n; ++i) {
      EXPECT_EQ(lp["tokens"][i], ref.tokenizer().token_bytes(ids[i]));
      EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), logprob_at(i - 1, ids[i]), 1e-4) << "token " << i;
      EXPECT_GE(lp["top_logprobs"][i].size(), 1u);
    }
    std::string joined;  // text_offset runs on across the prompt into the output
    for (size_t i = 0; i < lp["tokens"].size(); ++i) {
      EXPECT_EQ(lp["text_offset"][i], joined.size());
      joined += lp["tokens"][i].get<std::string>();
    }
  }
  const std::vector<json> events = stream_events(
      c, "/v1/completions", json{{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}, {"echo", true},
                                 {"ignore_eos", true}},
      /*usage=*/false);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[0]["choices"][0]["text"], prompt);
  std::string text;
  for (const json& e : events) text += e["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, prompt + engine_greedy(prompt, 2));
  // max_tokens 0 only with echo; chat never.
  expect_error(post(c, "/v1/completions", json{{"prompt", prompt}, {"max_tokens", 0}}), 400, "max_tokens");
  expect_error(post(c, "/v1/chat/completions",
                    json{{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 0}}),
               400, "max_tokens");
}

// /tokenize and /detokenize: the ids a completion (special tokens added) or a chat request
// (the template's render, none added) starts from, and ids back to text; errors name the field.
TEST_F(Serve, TokenizeAndDetokenize) {
  auto c = server_->client();
  Engine ref(EngineOptions{.model_dir = kTinyModel});
  const HttpReply t = post(c, "/tokenize", json{{"model", "tiny-main"}, {"prompt", kPrompt}});
  ASSERT_EQ(t.status, 200) << t.text;
  const std::vector<int32_t> ids = ref.tokenizer().encode(kPrompt, /*add_special=*/true);
  EXPECT_EQ(t.body["tokens"].get<std::vector<int32_t>>(), ids);
  EXPECT_EQ(t.body["count"], ids.size());
  EXPECT_EQ(t.body["max_model_len"], ref.config().max_position);
  const json messages = json::array({{{"role", "user"}, {"content", "Hello there"}}});
  const HttpReply m = post(c, "/tokenize", json{{"messages", messages}});
  ASSERT_EQ(m.status, 200) << m.text;
  EXPECT_EQ(m.body["tokens"].get<std::vector<int32_t>>(),
            ref.tokenizer().encode(bundled_chatml()->render(messages, true), /*add_special=*/false));
  const HttpReply d = post(c, "/detokenize", json{{"tokens", ids}});
  ASSERT_EQ(d.status, 200) << d.text;
  EXPECT_EQ(d.body["prompt"], ref.tokenizer().decode(ids));
  expect_error(post(c, "/tokenize", json{{"prompt", kPrompt}, {"messages", messages}}), 400, "prompt");
  expect_error(post(c, "/tokenize", json::object()), 400, "prompt");
  expect_error(post(c, "/tokenize", json{{"prompt", 5}}), 400, "prompt");
  expect_error(post(c, "/tokenize", json{{"prompt", "a"}, {"add_special_tokens", "yes"}}), 400, "add_special_tokens");
  expect_error(post(c, "/tokenize", json{{"prompt", "a"}, {"temperature", 1}}), 400, "temperature", "unknown_parameter");
  expect_error(post(c, "/tokenize", json{{"prompt", "a"}, {"model", "gpt-4"}}), 404, "model", "model_not_found");
  expect_error(post(c, "/detokenize", json{{"tokens", {1, -2}}}), 400, "tokens");
  expect_error(post(c, "/detokenize", json{{"tokens", {100000000}}}), 400, "tokens");
  EXPECT_EQ(c.Get("/tokenize")->status, 405);
}

TEST_F(Serve, ChatShapeStreamedAndNot) {
  auto c = server_->client();
  const json messages = json::array({{{"role", "user"}, {"content", "Hello there"}}});
  const HttpReply r = post(c, "/v1/chat/completions",
                           json{{"messages", messages}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true},
                                {"logprobs", true}, {"top_logprobs", 2}});
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(r.body["object"], "chat.completion");
  EXPECT_EQ(r.body["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  const json& ch = r.body["choices"][0];
  EXPECT_EQ(ch["message"]["role"], "assistant");
  EXPECT_EQ(ch["finish_reason"], "length");
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 6);
  ASSERT_EQ(ch["logprobs"]["content"].size(), 6u);
  for (const json& t : ch["logprobs"]["content"]) {
    EXPECT_TRUE(t["token"].is_string());
    EXPECT_TRUE(t["bytes"].is_array());
    ASSERT_EQ(t["top_logprobs"].size(), 2u);
    EXPECT_DOUBLE_EQ(t["top_logprobs"][0]["logprob"].get<double>(), t["logprob"].get<double>());
  }
  // The server's template (the bundled ChatML) renders "<|im_start|>user\n...<|im_end|>\n
  // <|im_start|>assistant\n"; the rendered text is tokenized without adding BOS again.
  EXPECT_EQ(ch["message"]["content"], engine_greedy(bundled_chatml()->render(messages, true), 6, /*add_special=*/false));

  const StreamReply s = post_stream(
      c, "/v1/chat/completions",
      json{{"messages", messages}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}});
  ASSERT_EQ(s.status, 200);
  bool done = false;
  const std::vector<json> events = parse_sse(s.text, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.front()["object"], "chat.completion.chunk");
  EXPECT_EQ(events.front()["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (const json& e : events) text += e["choices"][0]["delta"].value("content", "");
  EXPECT_EQ(text, ch["message"]["content"]);
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(events.back()["choices"][0]["delta"].empty());
}

TEST_F(Serve, ModelsHealthMetrics) {
  auto c = server_->client();
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  const json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "tiny-main");
  EXPECT_EQ(m["data"][0]["object"], "model");
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const std::string text = get_metrics(*server_);
  for (const char* name : {"twofold_num_requests_running", "twofold_num_requests_waiting", "twofold_kv_blocks_used",
                           "twofold_kv_blocks_free", "twofold_prefix_cache_hit_rate", "twofold_prompt_tokens_total",
                           "twofold_generation_tokens_total", "twofold_time_to_first_token_seconds_count",
                           "twofold_inter_token_latency_seconds_count", "twofold_e2e_request_latency_seconds_count"})
    EXPECT_GE(metric(text, name), 0) << name << " missing from\n" << text;
  EXPECT_CONTAINS(text, "# TYPE twofold_time_to_first_token_seconds histogram");
  EXPECT_CONTAINS(text, "twofold_time_to_first_token_seconds_bucket{le=\"+Inf\"}");
}

TEST_F(Serve, BadRequestsGet400NamingTheField) {
  auto c = server_->client();
  expect_error(post(c, "/v1/completions", std::string("{\"prompt\": ")), 400, nullptr);
  expect_error(post(c, "/v1/completions", std::string("[]")), 400, nullptr);
  expect_error(post(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", "many"}}), 400, "max_tokens");
  expect_error(post(c, "/v1/completions", json{{"prompt", kPrompt}, {"temperature", -0.5}}), 400, "temperature");
  expect_error(post(c, "/v1/completions", json{{"prompt", 42}}), 400, "prompt");
  expect_error(post(c, "/v1/completions", json{{"prompt", ""}}), 400, "prompt");
  expect_error(post(c, "/v1/completions", json{{"prompt", json::array({1, 99999999})}}), 400, "prompt");
  expect_error(post(c, "/v1/chat/completions", json{{"messages", json::array()}}), 400, "messages");
  expect_error(post(c, "/v1/chat/completions", json{{"messages", json::array({{{"role", "user"}}})}}), 400,
               "messages[0].content");
  // max_tokens beyond the context (1024 tokens for tiny-main).
  const HttpReply beyond = post(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 1024}});
  expect_error(beyond, 400, "max_tokens");
  EXPECT_CONTAINS(beyond.body["error"]["message"].get<std::string>(), "1024");
  // A prompt longer than the context.
  std::string long_prompt;
  for (int i = 0; i < 1500; ++i) long_prompt += "the sheep ";
  const HttpReply too_long = post(c, "/v1/completions", json{{"prompt", long_prompt}, {"max_tokens", 1}});
  expect_error(too_long, 400, "prompt");
  EXPECT_CONTAINS(too_long.body["error"]["message"].get<std::string>(), "context");
  // The server is still up and serving.
  const HttpReply ok = post(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 2}});
  EXPECT_EQ(ok.status, 200);
}

TEST_F(Serve, UnknownModelIs404ModelNotFound) {
  auto c = server_->client();
  expect_error(post(c, "/v1/completions", json{{"model", "gpt-9"}, {"prompt", kPrompt}}), 404, "model",
               "model_not_found");
  expect_error(post(c, "/v1/chat/completions",
                    json{{"model", "gpt-9"}, {"messages", json::array({{{"role", "user"}, {"content", "x"}}})}}),
               404, "model", "model_not_found");
}

TEST_F(Serve, UnknownPathIs404WrongMethod405AndLargeBodyIs413) {
  auto c = server_->client();
  expect_error(post(c, "/v1/nothing", json{{"prompt", "x"}}), 404, nullptr, "not_found");
  auto get = c.Get("/v1/completions");  // a POST-only path
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  EXPECT_EQ(get->get_header_value("Allow"), "POST");
  const std::string big = json{{"prompt", std::string(100 * 1024, 'a')}}.dump();
  const HttpReply r = post(c, "/v1/completions", big);
  expect_error(r, 413, nullptr, "request_too_large");
  auto again = server_->client();
  EXPECT_EQ(post(again, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 1}}).status, 200);
}

// A client that hangs up mid-stream: its request is aborted and its KV blocks freed.
TEST_F(Serve, DisconnectAbortsAndFreesKvBlocks) {
  const double aborted_before = [&] {
    const std::string t = get_metrics(*server_);
    const std::string key = "twofold_request_success_total{finished_reason=\"abort\"} ";
    return std::stod(t.substr(t.find(key) + key.size()));
  }();
  auto c = server_->client();
  std::atomic<int> chunks{0};
  const StreamReply s = post_stream(
      c, "/v1/completions",
      json{{"prompt", kPrompt}, {"max_tokens", 900}, {"ignore_eos", true}, {"stream", true}},
      [&](const std::string&) { return ++chunks < 3; });
  EXPECT_GE(chunks.load(), 3);
  EXPECT_EQ(wait_metric(*server_, "twofold_kv_blocks_used", 0), 0);
  EXPECT_EQ(wait_metric(*server_, "twofold_num_requests_running", 0), 0);
  const std::string t = get_metrics(*server_);
  const std::string key = "twofold_request_success_total{finished_reason=\"abort\"} ";
  EXPECT_EQ(std::stod(t.substr(t.find(key) + key.size())), aborted_before + 1) << t;
}

// A server with speculative decoding (prompt lookup, fixed length): the same greedy text as
// the engine without it, streamed and not, and the acceptance counters in /metrics.
TEST(ServeSpec, GreedyOutputUnchangedAndAcceptanceInMetrics) {
  TestServer s({}, EngineOptions{.spec = {.method = "ngram", .k = 4, .adaptive = false}});
  auto c = s.client();
  const json body{{"prompt", kPrompt}, {"max_tokens", 40}, {"temperature", 0}, {"ignore_eos", true}};
  const HttpReply r = post(c, "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.text;
  const std::string want = engine_greedy(kPrompt, 40);
  EXPECT_EQ(r.body["choices"][0]["text"], want);
  json streamed = body;
  streamed["stream"] = true;
  const StreamReply sr = post_stream(c, "/v1/completions", streamed);
  std::string text;
  for (size_t at = sr.text.find("data: {"); at != std::string::npos; at = sr.text.find("data: {", at + 1)) {
    const json chunk = json::parse(sr.text.substr(at + 6, sr.text.find('\n', at) - at - 6));
    text += chunk["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, want);
  const std::string m = get_metrics(s);
  EXPECT_GT(metric(m, "twofold_spec_decode_num_drafts_total"), 0) << m;
  EXPECT_GT(metric(m, "twofold_spec_decode_num_accepted_tokens_total"), 0);
  EXPECT_GT(metric(m, "twofold_spec_decode_acceptance_rate"), 0);
  EXPECT_GT(metric(m, "twofold_spec_decode_mean_accepted_length"), 1);
  EXPECT_EQ(metric(m, "twofold_spec_decode_num_draft_tokens_total") >= metric(m, "twofold_spec_decode_num_accepted_tokens_total"), true);
}

// Past max_running + max_waiting requests in flight: 429 with Retry-After.
TEST(ServeLimits, FullQueueGets429WithRetryAfter) {
  // The reference backend decodes tiny-main at ~50 tokens/s here (the CPU backend at ~1,800):
  // the 900-token streams must still be running when the queue is checked.
  TestServer s(serve::ServerOptions{.max_waiting = 1}, EngineOptions{.backend = "ref", .max_seqs = 1});
  std::promise<void> first_in, second_in;
  std::atomic<bool> hang_up{false};
  auto run_stream = [&](std::promise<void>& in) {
    auto c = s.client();
    bool signalled = false;
    post_stream(c, "/v1/completions",
                json{{"prompt", kPrompt}, {"max_tokens", 900}, {"ignore_eos", true}, {"stream", true}},
                [&](const std::string&) {
                  if (!signalled) in.set_value();
                  signalled = true;
                  return !hang_up.load();
                });
    if (!signalled) in.set_value();
  };
  std::thread a(run_stream, std::ref(first_in));
  first_in.get_future().wait();  // running
  std::thread b(run_stream, std::ref(second_in));
  // The second is admitted and waiting: its first bytes are keep-alive comments.
  second_in.get_future().wait();
  auto c = s.client();
  const HttpReply r = post(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 2}});
  expect_error(r, 429, nullptr, "rate_limit_exceeded");
  EXPECT_TRUE(r.headers.count("Retry-After")) << r.text;
  hang_up = true;
  a.join();
  b.join();
  EXPECT_EQ(wait_metric(s, "twofold_kv_blocks_used", 0), 0);
  // Capacity is back.
  EXPECT_EQ(post(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 2}}).status, 200);
}

TEST(ServeLimits, ApiKey) {
  TestServer s(serve::ServerOptions{.api_key = "sekret"});
  auto c = s.client();
  const json body{{"prompt", kPrompt}, {"max_tokens", 2}};
  expect_error(post(c, "/v1/completions", body), 401, nullptr, "invalid_api_key");
  expect_error(post(c, "/v1/completions", body, {{"Authorization", "Bearer wrong"}}), 401, nullptr, "invalid_api_key");
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  EXPECT_EQ(post(c, "/v1/completions", body, {{"Authorization", "Bearer sekret"}}).status, 200);
  // /health is always open; /metrics (load and token counts) needs the key too.
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 401);
  auto keyed = c.Get("/metrics", {{"Authorization", "Bearer sekret"}});
  ASSERT_TRUE(keyed);
  EXPECT_EQ(keyed->status, 200);
  expect_error(post(c, "/v1/nothing", body), 401, nullptr, "invalid_api_key");  // unknown paths too
}

// --open-metrics: a scraper without the key reads /metrics; /v1/* still needs it.
TEST(ServeLimits, OpenMetrics) {
  TestServer s(serve::ServerOptions{.api_key = "sekret", .open_metrics = true});
  auto c = s.client();
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_GE(metric(metrics->body, "twofold_kv_blocks_total"), 1);
  expect_error(post(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 2}}), 401, nullptr,
               "invalid_api_key");
}

// Fields the server does not implement are refused by name (they once got a 200 with plain
// text), here over HTTP; the full list is in test_openai_protocol.
TEST_F(Serve, UnimplementedFieldsAre400NamingThem) {
  auto c = server_->client();
  const json messages = json::array({{{"role", "user"}, {"content", "Hello"}}});
  expect_error(post(c, "/v1/chat/completions",
                    json{{"messages", messages},
                         {"response_format",
                          {{"type", "json_schema"},
                           {"json_schema",
                            {{"name", "x"},
                             {"schema", {{"type", "object"},
                                         {"properties", {{"d", {{"type", "string"}, {"pattern", "(a)\\1"}}}}}}}}}}}}),
               400, "response_format.json_schema.schema", "unsupported_parameter");
  // The bundled ChatML template never lists tools, so the model could not see them.
  const HttpReply tools = post(c, "/v1/chat/completions",
                               json{{"messages", messages},
                                    {"tools", json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}})}});
  expect_error(tools, 400, "tools");
  EXPECT_CONTAINS(tools.body["error"]["message"].get<std::string>(), "never reads 'tools'");
  expect_error(post(c, "/v1/completions", json{{"prompt", kPrompt}, {"guided_grammar", "root ::= x"}}), 400,
               "guided_grammar", "unknown_parameter");
  EXPECT_EQ(post(c, "/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 2}, {"user", "u"}}).status, 200);
}

// n choices: each is its own engine request (greedy: all equal the engine's output; sampled
// with a seed: seeds seed..seed+n-1, so choices differ and the same request repeats them),
// usage counts the prompt once and every choice's tokens; streamed, each choice's chunks carry
// its index, it gets its own role and finish chunks, and one [DONE] ends the stream.
TEST_F(Serve, SeveralChoicesWholeAndStreamed) {
  auto c = server_->client();
  const json greedy{{"prompt", kPrompt}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}, {"n", 2}};
  const HttpReply g = post(c, "/v1/completions", greedy);
  ASSERT_EQ(g.status, 200) << g.text;
  ASSERT_EQ(g.body["choices"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(g.body["choices"][i]["index"], i);
    EXPECT_EQ(g.body["choices"][i]["text"], engine_greedy(kPrompt, 6));
  }
  EXPECT_EQ(g.body["usage"]["completion_tokens"], 12);
  const HttpReply one = post(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 1}});
  EXPECT_EQ(g.body["usage"]["prompt_tokens"], one.body["usage"]["prompt_tokens"]);

  const json sampled{{"prompt", kPrompt}, {"max_tokens", 8}, {"temperature", 1.0}, {"seed", 11},
                     {"ignore_eos", true}, {"n", 3}};
  const HttpReply s1 = post(c, "/v1/completions", sampled);
  const HttpReply s2 = post(c, "/v1/completions", sampled);
  ASSERT_EQ(s1.status, 200) << s1.text;
  ASSERT_EQ(s1.body["choices"].size(), 3u);
  std::set<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    texts.insert(s1.body["choices"][i]["text"].get<std::string>());
    EXPECT_EQ(s1.body["choices"][i]["text"], s2.body["choices"][i]["text"]) << "choice " << i;
  }
  EXPECT_GT(texts.size(), 1u) << "the choices were sampled with the same seed";

  const json messages = json::array({{{"role", "user"}, {"content", "Hello"}}});
  const json chat{{"messages", messages}, {"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}, {"n", 2},
                  {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  const StreamReply st = post_stream(c, "/v1/chat/completions", chat);
  ASSERT_EQ(st.status, 200);
  bool done = false;
  const std::vector<json> events = parse_sse(st.text, &done);
  EXPECT_TRUE(done);
  std::map<int, std::string> content;
  std::map<int, int> roles, finishes;
  for (const json& e : events) {
    if (e["choices"].empty()) continue;
    const json& ch = e["choices"][0];
    const int i = ch["index"].get<int>();
    content[i] += ch["delta"].value("content", "");
    roles[i] += ch["delta"].contains("role");
    finishes[i] += !ch["finish_reason"].is_null();
  }
  ASSERT_EQ(events.back()["usage"]["completion_tokens"], 10) << st.text;
  json whole = chat;
  whole.erase("stream");
  whole.erase("stream_options");
  const HttpReply w = post(c, "/v1/chat/completions", whole);
  ASSERT_EQ(w.status, 200) << w.text;
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(roles[i], 1) << i;
    EXPECT_EQ(finishes[i], 1) << i;
    EXPECT_EQ(content[i], w.body["choices"][i]["message"]["content"]) << i;
  }
  EXPECT_EQ(content.size(), 2u);
}

// JSON mode: each choice's content is one JSON object, or the start of one where max_tokens
// cut it; streamed, the same content.
TEST_F(Serve, JsonObjectResponseFormat) {
  auto c = server_->client();
  const json messages = json::array({{{"role", "user"}, {"content", "Describe a king in JSON."}}});
  const json req{{"messages", messages}, {"max_tokens", 100}, {"temperature", 1.0}, {"seed", 5}, {"n", 3},
                 {"response_format", {{"type", "json_object"}}}};
  const HttpReply w = post(c, "/v1/chat/completions", req);
  ASSERT_EQ(w.status, 200) << w.text;
  ASSERT_EQ(w.body["choices"].size(), 3u);
  for (const json& ch : w.body["choices"]) {
    const std::string content = ch["message"]["content"].get<std::string>();
    SCOPED_TRACE(content);
    JsonMachine m;
    EXPECT_TRUE(m.feed(content)) << "not the start of a JSON object";
    EXPECT_EQ(m.complete(), ch["finish_reason"] == "stop");
    if (m.complete()) {
      EXPECT_TRUE(json::parse(content).is_object());
    }
  }
  json streamed = req;
  streamed["stream"] = true;
  const StreamReply st = post_stream(c, "/v1/chat/completions", streamed);
  ASSERT_EQ(st.status, 200);
  std::map<int, std::string> content;
  bool done = false;
  for (const json& e : parse_sse(st.text, &done)) {
    if (e["choices"].empty()) continue;
    content[e["choices"][0]["index"].get<int>()] += e["choices"][0]["delta"].value("content", "");
  }
  EXPECT_TRUE(done);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(content[i], w.body["choices"][i]["message"]["content"]) << i;
}

// Structured outputs: each choice is an object of the schema's shape (a schema without free
// strings, so that tiny-main's outputs end well within max_tokens).
TEST_F(Serve, JsonSchemaResponseFormat) {
  auto c = server_->client();
  const json schema = json::parse(R"({"type": "object", "properties": {"name": {"enum": ["Ada", "Bob"]},
      "age": {"type": "integer"}, "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "null"},
      "maxItems": 2}}, "required": ["name", "age", "ok", "tags"], "additionalProperties": false})");
  const json req{{"messages", json::array({{{"role", "user"}, {"content", "Who?"}}})},
                 {"max_tokens", 120}, {"temperature", 1.0}, {"seed", 9}, {"n", 3},
                 {"response_format", {{"type", "json_schema"},
                                      {"json_schema", {{"name", "person"}, {"strict", true}, {"schema", schema}}}}}};
  const HttpReply w = post(c, "/v1/chat/completions", req);
  ASSERT_EQ(w.status, 200) << w.text;
  for (const json& ch : w.body["choices"]) {
    const std::string content = ch["message"]["content"].get<std::string>();
    SCOPED_TRACE(content);
    ASSERT_EQ(ch["finish_reason"], "stop");
    const json v = json::parse(content);
    EXPECT_EQ(v.size(), 4u);
    EXPECT_TRUE(v["name"] == "Ada" || v["name"] == "Bob");
    EXPECT_TRUE(v["age"].is_number_integer());
    EXPECT_TRUE(v["ok"].is_boolean());
    EXPECT_TRUE(v["tags"].is_array() && v["tags"].size() <= 2u);
  }
}

// vLLM's guided_choice, guided_regex and guided_json hold tiny-main's output, on both
// endpoints and streamed: every choice is one of the strings, a whole match of the regex, or a
// value of the schema.
TEST_F(Serve, GuidedChoiceRegexAndJson) {
  auto c = server_->client();
  const json choices = json::array({"yes", "no", "not sure"});
  const HttpReply pick = post(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 10}, {"temperature", 1.0},
                                                         {"seed", 4}, {"n", 4}, {"guided_choice", choices}});
  ASSERT_EQ(pick.status, 200) << pick.text;
  for (const json& ch : pick.body["choices"]) {
    EXPECT_EQ(ch["finish_reason"], "stop") << ch.dump();
    EXPECT_NE(std::find(choices.begin(), choices.end(), ch["text"]), choices.end()) << ch.dump();
  }
  const std::string pattern = "[A-Z][a-z]{2,4}-\\d{2}( ok)?";
  const HttpReply re = post(c, "/v1/chat/completions",
                            json{{"messages", json::array({{{"role", "user"}, {"content", "Code?"}}})}, {"max_tokens", 20},
                                 {"temperature", 1.0}, {"seed", 6}, {"n", 3}, {"guided_regex", pattern}});
  ASSERT_EQ(re.status, 200) << re.text;
  for (const json& ch : re.body["choices"]) {
    const std::string text = ch["message"]["content"];
    EXPECT_TRUE(std::regex_match(text, std::regex(pattern))) << text;
    EXPECT_EQ(ch["finish_reason"], "stop");
  }
  const StreamReply st = post_stream(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 10}, {"seed", 2},
                                                                {"stream", true}, {"guided_choice", choices}});
  ASSERT_EQ(st.status, 200);
  bool done = false;
  std::string text;
  for (const json& e : parse_sse(st.text, &done))
    if (!e["choices"].empty()) text += e["choices"][0].value("text", "");
  EXPECT_TRUE(done);
  EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
  const HttpReply js = post(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 60}, {"seed", 1},
                                                       {"guided_json", {{"type", "object"},
                                                                        {"properties", {{"ok", {{"type", "boolean"}}}}},
                                                                        {"required", {"ok"}}}}});
  ASSERT_EQ(js.status, 200) << js.text;
  const json v = json::parse(js.body["choices"][0]["text"].get<std::string>());
  EXPECT_TRUE(v["ok"].is_boolean());
  expect_error(post(c, "/v1/completions", json{{"prompt", kPrompt}, {"guided_regex", "a(?=b)"}}), 400, "guided_regex",
               "unsupported_parameter");
}

// n past what the server admits at once is a 400 naming n, not a 429 that retrying cannot help.
TEST(ServeLimits, ChoicesPastTheAdmissionLimitAre400) {
  TestServer s(serve::ServerOptions{.max_waiting = 1}, EngineOptions{.max_seqs = 2});
  auto c = s.client();
  expect_error(post(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 1}, {"n", 4}}), 400, "n");
  EXPECT_EQ(post(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 1}, {"n", 3}}).status, 200);
}

// A model without a chat template (tiny-main's own folder) and no --chat-template: chat
// requests get 400 saying so, as vLLM answers, instead of a guessed template; completions work.
TEST(ServeLimits, NoChatTemplateIsA400ForChat) {
  TestServer s(serve::ServerOptions{}, EngineOptions{}, /*replicas=*/1, /*chat=*/std::nullopt);
  auto c = s.client();
  const HttpReply r = post(c, "/v1/chat/completions",
                           json{{"messages", json::array({{{"role", "user"}, {"content", "Hello"}}})}, {"max_tokens", 2}});
  expect_error(r, 400, "messages");
  EXPECT_EQ(r.body["error"]["type"], "invalid_request_error");
  EXPECT_CONTAINS(r.body["error"]["message"].get<std::string>(), "no chat template");
  EXPECT_CONTAINS(r.body["error"]["message"].get<std::string>(), "--chat-template");
  const HttpReply stream = post(c, "/v1/chat/completions",
                                json{{"messages", json::array({{{"role", "user"}, {"content", "Hello"}}})},
                                     {"max_tokens", 2}, {"stream", true}});
  expect_error(stream, 400, "messages");
  EXPECT_EQ(post(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 2}}).status, 200);
}

// Tools with a template that lists them (Qwen3's, over tiny-main's tokenizer): the prompt is
// the template's render with the tools in the client's key order, and output that is not a
// call stays content, streamed or not. (Output that is a call: test_tool_calls.cpp, since no
// bundled model writes one.)
TEST(ServeTools, ToolsReachTheTemplateAndPlainOutputStaysContent) {
  const auto qwen3 = ChatTemplate::from_model_dir(data_path("tokenizers/qwen3-151k"));
  ASSERT_TRUE(qwen3);
  TestServer s(serve::ServerOptions{}, EngineOptions{}, /*replicas=*/1, qwen3);
  EXPECT_EQ(s.server().tool_call_format(), serve::ToolCallFormat::Hermes);
  auto c = s.client();
  const std::string messages = R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"unit\": \"c\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "3 C"}])";
  const std::string tools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Now.",
      "parameters": {"type": "object", "properties": {"unit": {"type": "string"}, "city": {"type": "string"}}}}}])";
  const std::string body = R"({"messages": )" + messages + R"(, "tools": )" + tools +
                           R"(, "max_tokens": 8, "temperature": 0, "ignore_eos": true)";
  const HttpReply r = post(c, "/v1/chat/completions", body + "}");
  ASSERT_EQ(r.status, 200) << r.text;
  const auto tok = Tokenizer::from_dir(kTinyModel);
  const std::string prompt = qwen3->render_ordered(nlohmann::ordered_json::parse(messages), true,
                                                   nlohmann::ordered_json::parse(tools));
  EXPECT_CONTAINS(prompt, R"({"type": "function", "function": {"name": "get_weather", "description": "Now.", )"
                          R"("parameters": {"type": "object", "properties": {"unit": )");
  const size_t n_prompt = tok->encode(prompt, false).size();
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], n_prompt);
  EXPECT_NE(tok->encode(qwen3->render_ordered(nlohmann::ordered_json::parse(messages), true), false).size(), n_prompt);
  const json& ch = r.body["choices"][0];
  EXPECT_EQ(ch["message"]["content"], engine_greedy(prompt, 8, /*add_special=*/false));
  EXPECT_FALSE(ch["message"].contains("tool_calls"));
  EXPECT_EQ(ch["finish_reason"], "length");

  // The same bytes (a json object would sort the tools' keys, and the prompt with them).
  const StreamReply st = post_stream(c, "/v1/chat/completions", body + R"(, "stream": true})");
  ASSERT_EQ(st.status, 200);
  bool done = false;
  std::string text;
  const std::vector<json> events = parse_sse(st.text, &done);
  for (const json& e : events) {
    text += e["choices"][0]["delta"].value("content", "");
    EXPECT_FALSE(e["choices"][0]["delta"].contains("tool_calls"));
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(text, ch["message"]["content"]);
  EXPECT_EQ(events.back()["choices"][0]["finish_reason"], "length");

  // tool_choice "none": the tools are not listed.
  const HttpReply none = post(c, "/v1/chat/completions", body + R"(, "tool_choice": "none"})");
  ASSERT_EQ(none.status, 200) << none.text;
  EXPECT_LT(none.body["usage"]["prompt_tokens"].get<size_t>(), n_prompt);
}

// tool_choice "required" and a named function hold tiny-main (which never writes a call by
// itself) to one call in the template's format (hermes for Qwen3's): the reply has it as
// tool_calls, with arguments of the tool's parameters; streamed too. Parameters outside the
// schema subset are a 400 naming them.
// Mistral's format, found from a template that writes [TOOL_CALLS] (a small one in Mistral's
// style: tools between [AVAILABLE_TOOLS] markers, earlier calls after [TOOL_CALLS]): the
// forced call is written as a list of one after [TOOL_CALLS] and comes back as tool_calls,
// whole and streamed.
TEST(ServeTools, MistralFormatFromTheTemplateAndAForcedCall) {
  const ChatTemplate mistral = ChatTemplate::from_source(
      "{%- if tools %}{{ '[AVAILABLE_TOOLS]' + (tools | tojson) + '[/AVAILABLE_TOOLS]' }}{%- endif %}"
      "{%- for m in messages %}{%- if m['role'] == 'user' %}{{ '[INST]' + m['content'] + '[/INST]' }}"
      "{%- elif m['tool_calls'] is defined %}{{ '[TOOL_CALLS]' + (m['tool_calls'] | tojson) + '</s>' }}"
      "{%- else %}{{ m['content'] }}{%- endif %}{%- endfor %}",
      "", "");
  TestServer s(serve::ServerOptions{}, EngineOptions{}, /*replicas=*/1, mistral);
  EXPECT_EQ(s.server().tool_call_format(), serve::ToolCallFormat::Mistral);
  auto c = s.client();
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"enum": ["Oslo", "Rome"]}}, "required": ["city"]}}}])");
  const json req{{"messages", json::array({{{"role", "user"}, {"content", "Weather in Oslo?"}}})},
                 {"tools", tools}, {"tool_choice", "required"}, {"max_tokens", 60}, {"temperature", 1.0}, {"seed", 5}};
  const HttpReply r = post(c, "/v1/chat/completions", req);
  ASSERT_EQ(r.status, 200) << r.text;
  const json& ch = r.body["choices"][0];
  EXPECT_EQ(ch["finish_reason"], "tool_calls") << ch.dump();
  ASSERT_GE(ch["message"]["tool_calls"].size(), 1u) << ch.dump();  // "required" with parallel calls: one or more
  for (const json& call : ch["message"]["tool_calls"]) {
    EXPECT_EQ(call["function"]["name"], "get_weather");
    const json args = json::parse(call["function"]["arguments"].get<std::string>());
    EXPECT_TRUE(args["city"] == "Oslo" || args["city"] == "Rome") << args.dump();
  }
  json streamed = req;
  streamed["stream"] = true;
  const StreamReply st = post_stream(c, "/v1/chat/completions", streamed);
  ASSERT_EQ(st.status, 200);
  bool done = false;
  int n_calls = 0;
  std::string content;
  for (const json& e : parse_sse(st.text, &done)) {
    if (e["choices"].empty()) continue;
    const json& d = e["choices"][0]["delta"];
    content += d.value("content", "");
    if (d.contains("tool_calls")) {
      ++n_calls;
      EXPECT_EQ(d["tool_calls"][0]["function"]["name"], "get_weather");
    }
  }
  EXPECT_TRUE(done);
  EXPECT_GE(n_calls, 1);
  EXPECT_EQ(content, "");
}

TEST(ServeTools, ToolChoiceRequiredGivesCallsAndNamedOne) {
  const auto qwen3 = ChatTemplate::from_model_dir(data_path("tokenizers/qwen3-151k"));
  ASSERT_TRUE(qwen3);
  TestServer s(serve::ServerOptions{}, EngineOptions{}, /*replicas=*/1, qwen3);
  auto c = s.client();
  const json tools = json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"enum": ["Oslo", "Rome"]}, "days": {"type": "integer"}, "unit": {"$ref": "#/$defs/unit"}},
      "required": ["city", "unit"], "$defs": {"unit": {"enum": ["c", "f"]}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
      "properties": {"utc": {"type": "boolean"}}}}}])");
  const json messages = json::array({{{"role", "user"}, {"content", "Weather in Oslo?"}}});
  auto check_call = [](const json& call, const std::string& want_name) {
    SCOPED_TRACE(call.dump());
    EXPECT_EQ(call["type"], "function");
    const std::string name = call["function"]["name"];
    if (!want_name.empty()) {
      EXPECT_EQ(name, want_name);
    }
    const json args = json::parse(call["function"]["arguments"].get<std::string>());
    if (name == "get_weather") {  // days and utc are optional
      EXPECT_TRUE(args["city"] == "Oslo" || args["city"] == "Rome");
      EXPECT_TRUE(!args.contains("days") || args["days"].is_number_integer());
      EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f");
      EXPECT_EQ(args.size(), 2u + args.contains("days"));
    } else {
      EXPECT_EQ(name, "get_time");
      EXPECT_TRUE(!args.contains("utc") || args["utc"].is_boolean());
      EXPECT_EQ(args.size(), size_t(args.contains("utc")));
    }
  };
  // "required" writes one call or more (parallel_tool_calls is true by default), or exactly one
  // with parallel_tool_calls false; a named function exactly one.
  size_t most = 0;
  for (const json& choice : {json("required"), json{{"type", "function"}, {"function", {{"name", "get_time"}}}},
                             json("required-one")}) {
    const bool one = choice != "required";
    // EOS (id 1) favoured where the format allows it, so that tiny-main, which would go on
    // writing calls, ends after one or a few.
    json req{{"messages", messages}, {"tools", tools}, {"tool_choice", choice == "required-one" ? json("required") : choice},
             {"max_tokens", 160}, {"temperature", 1.0}, {"seed", 3}, {"n", 4}, {"logit_bias", {{"1", 8}}}};
    if (choice == "required-one") req["parallel_tool_calls"] = false;
    const HttpReply r = post(c, "/v1/chat/completions", req);
    ASSERT_EQ(r.status, 200) << r.text;
    int n_ended = 0;
    for (const json& ch : r.body["choices"]) {
      if (ch["finish_reason"] == "length") continue;  // tiny-main's whitespace or calls may not fit max_tokens
      ++n_ended;
      EXPECT_EQ(ch["finish_reason"], "tool_calls") << ch.dump();
      ASSERT_TRUE(ch["message"].contains("tool_calls")) << ch.dump();
      const size_t n = ch["message"]["tool_calls"].size();
      EXPECT_TRUE(one ? n == 1 : n >= 1) << ch.dump();
      if (!one) most = std::max(most, n);
      for (const json& call : ch["message"]["tool_calls"]) check_call(call, choice.is_object() ? "get_time" : "");
    }
    EXPECT_GE(n_ended, 2) << r.text;
    if (choice == "required-one") continue;
    json streamed = req;
    streamed["stream"] = true;
    streamed["n"] = 1;
    const StreamReply st = post_stream(c, "/v1/chat/completions", streamed);
    ASSERT_EQ(st.status, 200);
    bool done = false, cut = false;
    int n_calls = 0;
    for (const json& e : parse_sse(st.text, &done)) {
      if (e["choices"].empty()) continue;
      cut = cut || e["choices"][0].value("finish_reason", json()) == "length";
      const json& d = e["choices"][0]["delta"];
      if (d.contains("tool_calls")) {
        ++n_calls;
        check_call(d["tool_calls"][0], choice.is_object() ? "get_time" : "");
      }
    }
    EXPECT_TRUE(done);
    if (!cut) {
      EXPECT_TRUE(choice.is_object() ? n_calls == 1 : n_calls >= 1) << n_calls;
    }
  }
  std::printf("tool_choice required: at most %zu calls in a choice\n", most);
  json bad = tools;
  bad[1]["function"]["parameters"]["properties"]["utc"] = {{"type", "string"}, {"format", "hostname"}};
  expect_error(post(c, "/v1/chat/completions",
                    json{{"messages", messages}, {"tools", bad}, {"tool_choice", "required"}}),
               400, "tools[1].function.parameters", "unsupported_parameter");
  expect_error(post(c, "/v1/chat/completions",
                    json{{"messages", messages}, {"tools", tools},
                         {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}),
               400, "tool_choice.function.name");
  // With "auto" the same bad parameters are not compiled: the output is free.
  EXPECT_EQ(post(c, "/v1/chat/completions",
                 json{{"messages", messages}, {"tools", bad}, {"max_tokens", 2}}).status, 200);
}

TEST(ServeTools, NoKnownFormatIsA400NamingTools) {
  const auto qwen3 = ChatTemplate::from_model_dir(data_path("tokenizers/qwen3-151k"));
  TestServer s(serve::ServerOptions{.tool_call_format = serve::ToolCallFormat::None}, EngineOptions{}, 1, qwen3);
  auto c = s.client();
  const HttpReply r = post(c, "/v1/chat/completions",
                           json{{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                                {"tools", json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}})}});
  expect_error(r, 400, "tools");
  EXPECT_CONTAINS(r.body["error"]["message"].get<std::string>(), "--tool-call-parser");
}

// Reasoning (serve/reasoning.h) end to end over tiny-main, which writes no <think> itself: a
// template that opens the block in the prompt (as DeepSeek-R1's does) makes the whole greedy
// output reasoning, whole and streamed alike; Qwen3's template (reasoning found from it) with
// thinking on or off leaves tiny-main's output content and reasoning_content null.
TEST(ServeReasoning, AnOpenBlockIsReasoningAndPlainOutputStaysContent) {
  const ChatTemplate opens = ChatTemplate::from_source(
      "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}",
      "", "");
  TestServer s(serve::ServerOptions{.reasoning_format = serve::ReasoningFormat::Think}, EngineOptions{}, 1, opens);
  EXPECT_EQ(s.server().reasoning_format(), serve::ReasoningFormat::Think);
  auto c = s.client();
  const json messages = json::array({{{"role", "user"}, {"content", "Why is the sky blue?"}}});
  const std::string prompt = opens.render(messages, true);
  ASSERT_TRUE(prompt.ends_with("assistant\n<think>\n")) << prompt;
  const std::string greedy = engine_greedy(prompt, 10, /*add_special=*/false);
  ASSERT_FALSE(greedy.empty());
  ASSERT_EQ(greedy.find("</think>"), std::string::npos);
  const json body{{"messages", messages}, {"max_tokens", 10}, {"temperature", 0}, {"ignore_eos", true}};
  const HttpReply r = post(c, "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.text;
  const json& msg = r.body["choices"][0]["message"];
  EXPECT_EQ(msg["reasoning_content"], greedy);
  EXPECT_EQ(msg["content"], "");
  EXPECT_EQ(r.body["usage"]["completion_tokens_details"]["reasoning_tokens"], 10);  // all of it

  std::string reasoning, content;
  int reasoning_chunks = 0;
  const std::vector<json> events = stream_events(c, "/v1/chat/completions", body, /*usage=*/true);
  ASSERT_FALSE(events.empty());
  for (const json& e : events) {
    if (e["choices"].empty()) {  // the usage chunk
      EXPECT_EQ(e["usage"]["completion_tokens_details"]["reasoning_tokens"], 10);
      continue;
    }
    const json& delta = e["choices"][0]["delta"];
    if (delta.contains("reasoning_content")) ++reasoning_chunks;
    reasoning += delta.value("reasoning_content", "");
    content += delta.value("content", "");
  }
  EXPECT_EQ(reasoning, greedy);
  EXPECT_GT(reasoning_chunks, 1) << "the reasoning went out in one piece, not as it came";
  EXPECT_EQ(content, "");

  // Qwen3's template: the format is found from it; tiny-main's output does not open a block.
  const auto qwen3 = ChatTemplate::from_model_dir(data_path("tokenizers/qwen3-151k"));
  ASSERT_TRUE(qwen3);
  TestServer q(serve::ServerOptions{}, EngineOptions{}, 1, qwen3);
  EXPECT_EQ(q.server().reasoning_format(), serve::ReasoningFormat::Think);
  auto qc = q.client();
  for (const bool thinking : {true, false}) {
    SCOPED_TRACE(thinking ? "enable_thinking true" : "enable_thinking false");
    json b = body;
    b["chat_template_kwargs"] = {{"enable_thinking", thinking}};
    const HttpReply qr = post(qc, "/v1/chat/completions", b);
    ASSERT_EQ(qr.status, 200) << qr.text;
    const std::string qprompt = qwen3->render(messages, true, nullptr, {{"enable_thinking", thinking}});
    EXPECT_EQ(qr.body["choices"][0]["message"]["content"], engine_greedy(qprompt, 10, /*add_special=*/false));
    EXPECT_TRUE(qr.body["choices"][0]["message"]["reasoning_content"].is_null());
    EXPECT_EQ(qr.body["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);
  }
  // Server-wide template variables (--chat-template-kwargs), which a request's own override.
  TestServer k(serve::ServerOptions{.chat_template_kwargs = {{"enable_thinking", false}}}, EngineOptions{}, 1, qwen3);
  auto kc = k.client();
  const auto tok = Tokenizer::from_dir(kTinyModel);
  auto n_prompt = [&](bool thinking) {
    return tok->encode(qwen3->render(messages, true, nullptr, {{"enable_thinking", thinking}}), false).size();
  };
  ASSERT_NE(n_prompt(false), n_prompt(true));
  const HttpReply kr = post(kc, "/v1/chat/completions", body);
  ASSERT_EQ(kr.status, 200) << kr.text;
  EXPECT_EQ(kr.body["usage"]["prompt_tokens"], n_prompt(false));
  json thinking = body;
  thinking["chat_template_kwargs"] = {{"enable_thinking", true}};
  const HttpReply kt = post(kc, "/v1/chat/completions", thinking);
  ASSERT_EQ(kt.status, 200) << kt.text;
  EXPECT_EQ(kt.body["usage"]["prompt_tokens"], n_prompt(true));
  // --reasoning-parser none: no field at all.
  TestServer n(serve::ServerOptions{.reasoning_format = serve::ReasoningFormat::None}, EngineOptions{}, 1, qwen3);
  auto nc = n.client();
  const HttpReply nr = post(nc, "/v1/chat/completions", body);
  ASSERT_EQ(nr.status, 200) << nr.text;
  EXPECT_FALSE(nr.body["choices"][0]["message"].contains("reasoning_content"));
}

// shutdown() (what SIGTERM calls): new requests get 503 while in-flight ones run to the end.
TEST(ServeLimits, GracefulShutdownFinishesInFlightRequests) {
  // A grace period past any machine's time for the 900 tokens (ThreadSanitizer on a loaded
  // machine took over 30 s, the default): this test is about draining, not its time limit.
  TestServer s(serve::ServerOptions{.grace_s = 900});
  std::promise<void> started;
  StreamReply reply;
  std::thread client([&] {
    auto c = s.client();
    bool signalled = false;
    reply = post_stream(c, "/v1/completions",
                        json{{"prompt", kPrompt}, {"max_tokens", 900}, {"ignore_eos", true}, {"stream", true},
                             {"stream_options", {{"include_usage", true}}}},
                        [&](const std::string&) {
                          if (!signalled) started.set_value();
                          signalled = true;
                          return true;
                        });
    if (!signalled) started.set_value();
  });
  started.get_future().wait();
  std::thread stopper([&] { s.shutdown(); });
  auto c = s.client();
  int health = 200;
  while (health == 200) {
    auto h = c.Get("/health");
    health = h ? h->status : 0;
  }
  EXPECT_EQ(health, 503);  // draining, not yet stopped: the stream still runs
  EXPECT_EQ(post(c, "/v1/completions", json{{"prompt", kPrompt}, {"max_tokens", 2}}).status, 503);
  client.join();
  stopper.join();
  bool done = false;
  const std::vector<json> events = parse_sse(reply.text, &done);
  EXPECT_TRUE(done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 900 - 0) << reply.text.substr(0, 200);
}

// A port past 65535 is refused by name, not taken modulo 65536 by the resolver.
TEST(ServeBind, PortOutsideTheRangeIsAnErrorNamingIt) {
  serve::ServerMetrics metrics;
  std::vector<std::unique_ptr<serve::EngineLoop>> loops;
  loops.push_back(std::make_unique<serve::EngineLoop>(
      std::make_unique<Engine>(EngineOptions{.model_dir = kTinyModel, .backend = "ref"}), metrics));
  serve::ReplicaRouter router(std::move(loops));
  for (const int port : {99999, -1}) {
    serve::HttpServer server(router, nullptr, metrics, serve::ServerOptions{.port = port});
    try {
      server.bind();
      ADD_FAILURE() << "port " << port << " was bound";
    } catch (const std::exception& e) {
      EXPECT_CONTAINS(std::string(e.what()), std::to_string(port));
    }
  }
}

}  // namespace
}  // namespace tf::test
