// Data parallelism behind one server: the routing rule on its own (no engines), then two
// tiny-main replicas behind the in-process HTTP server: concurrent requests spread over
// both and all complete with the single engine's greedy text; the summed gauges and the
// per-replica lines in /metrics; repeated prompts stick to the replica that has their
// prefix cached.
#include <gtest/gtest.h>

#include <future>

#include "model/tokenizer/tokenizer.h"
#include "serve/routing_policy.h"
#include "serve_test_util.h"

namespace tf::test {
namespace {

using nlohmann::json;

int route(std::vector<int64_t> loads, int affinity = -1, size_t rotate = 0, int64_t slack = 2) {
  return serve::choose_replica(serve::RouteInput{.loads = loads, .affinity = affinity, .slack = slack, .rotate = rotate});
}

TEST(RoutingPolicy, LeastLoadedWinsAndTiesRotate) {
  EXPECT_EQ(route({3, 1, 2}), 1);
  EXPECT_EQ(route({0, 0, 0}, -1, 0), 0);
  EXPECT_EQ(route({0, 0, 0}, -1, 1), 1);
  EXPECT_EQ(route({0, 0, 0}, -1, 5), 2);
  EXPECT_EQ(route({1, 0, 0}, -1, 0), 1);  // first least loaded at or after the rotation
  EXPECT_EQ(route({5}, -1, 7), 0);
}

TEST(RoutingPolicy, PrefixAffinityWithinSlack) {
  EXPECT_EQ(route({2, 0}, 0), 0);                // 2 <= 0 + 2: stay where the prefix is cached
  EXPECT_EQ(route({3, 0}, 0), 1);                // too busy: least loaded instead
  EXPECT_EQ(route({3, 0}, 0, 0, /*slack=*/0), 1);
  EXPECT_EQ(route({0, 0}, 1, 0, /*slack=*/0), 1);
  EXPECT_EQ(route({0, 0}, 7), 0);                // unknown replica: ignored
}

// Greedy text of tiny-main for `prompt` from a lone engine.
std::string engine_greedy(const std::string& prompt, int32_t n) {
  Engine e(EngineOptions{.model_dir = kTinyModel, .max_seqs = 4});
  e.add_request({.prompt = prompt, .sampling = {.temperature = 0, .max_tokens = n, .ignore_eos = true}});
  std::string text;
  while (e.has_unfinished())
    for (const RequestOutput& o : e.step()) text += o.text;
  return text;
}

// A labelled sample `name{replica="i"} value`; -1 if absent.
double replica_metric(const std::string& text, const std::string& name, int replica) {
  return metric(text, name + "{replica=\"" + std::to_string(replica) + "\"}");
}

TEST(DataParallel, RequestsSpreadOverReplicasAndAllComplete) {
  TestServer s(serve::ServerOptions{}, EngineOptions{.max_seqs = 4}, /*replicas=*/2);
  const std::vector<std::string> prompts = {"The LORD is my shepherd;", "In the beginning", "SELECT * FROM",
                                            "def main():", "The quick brown fox", "apt-get install"};
  std::vector<std::future<HttpReply>> replies;
  for (const std::string& p : prompts)
    replies.push_back(std::async(std::launch::async, [&s, p] {
      auto c = s.client();
      return post(c, "/v1/completions", json{{"prompt", p}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}});
    }));
  for (size_t i = 0; i < prompts.size(); ++i) {
    const HttpReply r = replies[i].get();
    ASSERT_EQ(r.status, 200) << r.text;
    EXPECT_EQ(r.body["choices"][0]["text"], engine_greedy(prompts[i], 8)) << prompts[i];
    EXPECT_EQ(r.body["usage"]["completion_tokens"], 8);
  }
  const std::vector<int64_t> routed = s.router().n_routed();
  ASSERT_EQ(routed.size(), 2u);
  EXPECT_GE(routed[0], 1);
  EXPECT_GE(routed[1], 1);
  EXPECT_EQ(routed[0] + routed[1], int64_t(prompts.size()));

  EXPECT_EQ(wait_metric(s, "twofold_num_requests_running", 0), 0);
  const std::string m = get_metrics(s);
  EXPECT_EQ(replica_metric(m, "twofold_replica_requests_routed_total", 0), double(routed[0]));
  EXPECT_EQ(replica_metric(m, "twofold_replica_requests_routed_total", 1), double(routed[1]));
  EXPECT_EQ(replica_metric(m, "twofold_replica_num_requests_running", 1), 0);
  // Summed over replicas: both pools, and every finished request once.
  EXPECT_EQ(metric(m, "twofold_kv_blocks_total"), 2.0 * s.router().kv_pool_tokens() / s.router().kv_block_size());
  EXPECT_EQ(metric(m, "twofold_request_success_total{finished_reason=\"length\"}"), double(prompts.size()));
  EXPECT_EQ(metric(m, "twofold_generation_tokens_total"), 8.0 * double(prompts.size()));
}

TEST(DataParallel, RepeatedPromptsStayWithTheReplicaHoldingTheirPrefix) {
  TestServer s(serve::ServerOptions{}, EngineOptions{.max_seqs = 4}, /*replicas=*/2);
  const std::string prompt =
      "The LORD is my shepherd; I shall not want. He maketh me to lie down in green pastures: he leadeth me "
      "beside the still waters.";
  ASSERT_GE(s.router().tokenizer().encode(prompt).size(), size_t(s.router().kv_block_size()));
  auto c = s.client();
  for (int i = 0; i < 3; ++i) {
    const HttpReply r = post(c, "/v1/completions", json{{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}});
    ASSERT_EQ(r.status, 200) << r.text;
  }
  const std::vector<int64_t> routed = s.router().n_routed();
  EXPECT_EQ(std::max(routed[0], routed[1]), 3) << routed[0] << " " << routed[1];
  const int owner = routed[0] == 3 ? 0 : 1;
  EXPECT_EQ(wait_metric(s, "twofold_num_requests_running", 0), 0);
  EXPECT_GT(replica_metric(get_metrics(s), "twofold_replica_prefix_cache_hits_total", owner), 0);
  // A short prompt (no full KV block) has no affinity: it goes to the idle replica by rotation.
  const HttpReply r = post(c, "/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 2}});
  ASSERT_EQ(r.status, 200) << r.text;
  EXPECT_EQ(s.router().n_routed()[0] + s.router().n_routed()[1], 4);
}

}  // namespace
}  // namespace tf::test
