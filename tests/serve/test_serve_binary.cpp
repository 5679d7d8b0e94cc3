// The `twofold serve` binary as an operator runs it: --help, the startup lines, and SIGTERM
// (new requests refused, the in-flight stream finished, exit status 0; past the grace
// period the stream ends with finish_reason "abort" and the exit status is still 0).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <future>

#include "serve_test_util.h"
#include "tools/cli_util.h"
#include "tools/serve_process.h"

namespace tf::test {
namespace {

using nlohmann::json;

// Streams a long completion; `started` is set at the first bytes.
std::string stream_long(int port, std::promise<void>& started) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = json{{"prompt", "The LORD is my shepherd;"}, {"max_tokens", 800}, {"ignore_eos", true},
                  {"stream", true}, {"stream_options", {{"include_usage", true}}}}
                 .dump();
  req.set_header("Content-Type", "application/json");
  std::string text;
  bool signalled = false;
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    text.append(d, n);
    if (!signalled) started.set_value();
    signalled = true;
    return true;
  };
  c.send(req);
  if (!signalled) started.set_value();
  return text;
}

TEST(ServeBinary, HelpListsTheOptions) {
  const CliResult r = run_twofold("serve --help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* opt : {"--port", "--dp", "--tp", "--api-key", "--max-waiting", "--max-body-bytes", "--served-model-name",
                          "--grace-period", "--max-connections", "--listen-backlog", "--open-metrics", "--model",
                          "--chat-template"})
    EXPECT_CONTAINS(r.out, opt);
}

TEST(ServeBinary, StartupSaysAddressModelBackendAndKvCapacity) {
  ServeProcess p({"--served-model-name", "tiny"});
  ASSERT_GT(p.port(), 0) << p.banner();
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 0);
  EXPECT_CONTAINS(p.banner(), "listening on http://127.0.0.1:");
  EXPECT_CONTAINS(p.banner(), "model tiny (");
  EXPECT_CONTAINS(p.banner(), "backend cpu");
  EXPECT_CONTAINS(p.banner(), "KV cache: ");
  EXPECT_CONTAINS(p.banner(), " tokens (f32, ");
  EXPECT_CONTAINS(p.banner(), "chat template none (chat requests get 400; --chat-template FILE gives one)");
}

TEST(ServeBinary, ChatTemplateFileIsUsedForChats) {
  const std::string chatml = source_path("examples/chatml.jinja");
  ServeProcess p({"--chat-template", chatml});
  ASSERT_GT(p.port(), 0) << p.banner();
  EXPECT_CONTAINS(p.banner(), "chat template " + chatml);
  httplib::Client c("127.0.0.1", p.port());
  c.set_read_timeout(120, 0);
  const HttpReply r = post(c, "/v1/chat/completions",
                           json{{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 2}});
  EXPECT_EQ(r.status, 200) << r.text;
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 0);
}

// --dp 2 (two engine replicas, each sharded --tp 2): concurrent requests all complete and
// both replicas took some.
TEST(ServeBinary, DataParallelReplicasShareTheRequests) {
  ServeProcess p({"--dp", "2", "--tp", "2", "--max-seqs", "4"});
  ASSERT_GT(p.port(), 0) << p.banner();
  std::vector<std::future<int>> replies;
  for (int i = 0; i < 6; ++i)
    replies.push_back(std::async(std::launch::async, [&p, i] {
      httplib::Client c("127.0.0.1", p.port());
      c.set_read_timeout(120, 0);
      const HttpReply r = post(c, "/v1/completions",
                               json{{"prompt", "Request number " + std::to_string(i)}, {"max_tokens", 6}, {"ignore_eos", true}});
      return r.status == 200 && r.body["usage"]["completion_tokens"] == 6 ? 200 : r.status;
    }));
  for (auto& r : replies) EXPECT_EQ(r.get(), 200);
  httplib::Client c("127.0.0.1", p.port());
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  const double r0 = metric(res->body, "twofold_replica_requests_routed_total{replica=\"0\"}");
  const double r1 = metric(res->body, "twofold_replica_requests_routed_total{replica=\"1\"}");
  EXPECT_GE(r0, 1);
  EXPECT_GE(r1, 1);
  EXPECT_EQ(r0 + r1, 6);
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 0);
}

// The server on tiny-main quantized to int4 at load and split over 2 ranks (whole int4 groups
// per rank): greedy completions come back, the same text each time.
TEST(ServeBinary, QuantizedTensorParallelModelServesDeterministically) {
  ServeProcess p({"--quantization", "int4", "--tp", "2", "--max-seqs", "4"});
  ASSERT_GT(p.port(), 0) << p.banner();
  httplib::Client c("127.0.0.1", p.port());
  c.set_read_timeout(120, 0);
  const std::string body = json{{"prompt", "The LORD is my shepherd;"}, {"max_tokens", 8}, {"temperature", 0},
                                {"ignore_eos", true}}.dump();
  const HttpReply a = post(c, "/v1/completions", body), b = post(c, "/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.text;
  ASSERT_EQ(b.status, 200) << b.text;
  EXPECT_EQ(a.body["usage"]["completion_tokens"], 8);
  EXPECT_EQ(a.body["choices"][0]["text"], b.body["choices"][0]["text"]);
  EXPECT_FALSE(a.body["choices"][0]["text"].get<std::string>().empty());
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 0);
}

// Starts a long stream on a server with `grace_period` seconds of grace, sends SIGTERM once
// the stream runs, and returns the stream's events (asserting the exit code and [DONE]).
std::vector<json> events_of_stream_cut_by_sigterm(const std::string& grace_period) {
  ServeProcess p({"--grace-period", grace_period});
  if (p.port() <= 0) {
    ADD_FAILURE() << "the server did not start";
    return {};
  }
  std::promise<void> started;
  auto reply = std::async(std::launch::async, [&] { return stream_long(p.port(), started); });
  started.get_future().wait();
  p.signal(SIGTERM);
  const std::string text = reply.get();
  EXPECT_EQ(p.wait(), 0);
  bool done = false;
  std::vector<json> events = parse_sse(text, &done);
  EXPECT_TRUE(done);
  return events;
}

TEST(ServeBinary, SigtermFinishesTheInFlightStreamAndExitsZero) {
  // Grace enough for the sanitizer builds too, where the 800 tokens take over a minute.
  const std::vector<json> events = events_of_stream_cut_by_sigterm("600");
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 800);
}

TEST(ServeBinary, PastTheGracePeriodInFlightRequestsAreAborted) {
  const std::vector<json> events = events_of_stream_cut_by_sigterm("0");
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "abort");
  EXPECT_LT(events.back()["usage"]["completion_tokens"].get<int>(), 800);
}

TEST(ServeBinary, PortInUseIsAnErrorNamingIt) {
  ServeProcess p({});
  ASSERT_GT(p.port(), 0);
  const CliResult r = run_twofold("serve -m " + kTinyModel + " --port " + std::to_string(p.port()));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(r.err, std::to_string(p.port()));
  p.signal(SIGTERM);
  EXPECT_EQ(p.wait(), 0);
}

}  // namespace
}  // namespace tf::test
