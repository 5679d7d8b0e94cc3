// `twofold serve`: the OpenAI-compatible HTTP server (src/serve) over one engine.
//
// Threads: the main thread loads the model and then serves HTTP (with one more I/O thread
// and a small pool that parses and tokenizes requests); the engine thread (EngineLoop) owns
// the Engine (with --dp M, M engine threads, each owning a replica, behind a router that
// picks the least-loaded one; --tp N shards each replica's model); a signal thread waits
// for SIGTERM/SIGINT and drains the server (503 to new requests, in-flight ones finish
// within --grace-period, the rest are aborted), after which the process exits 0.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "chat/chat_template.h"
#include "dist/rank_threads.h"
#include "model/config.h"
#include "serve/engine_loop.h"
#include "serve/replica_router.h"
#include "serve/http_server.h"
#include "serve/metrics.h"
#include "tools/commands.h"
#include "twofold/engine.h"

namespace tf::cli {
namespace {

struct ServeArgs {
  ModelArgs model;
  serve::ServerOptions server;
  int max_seqs = 64;
  int max_batch_tokens = 512;
  int block_size = 16;
  int64_t kv_memory_mb = 2048;
  bool no_prefix_caching = false;
  int tp = 1;  // tensor-parallel ranks per replica
  int dp = 1;  // data-parallel replicas
  std::string chat_template;  // --chat-template FILE
  std::string tool_call_parser = "auto";
  std::string reasoning_parser = "auto";
  std::string template_kwargs;  // --chat-template-kwargs
  SpecArgs spec;
};

// Blocks the shutdown signals in this thread and so in every thread started after it; the
// signal thread takes them with sigwait. SIGPIPE (a client gone mid-write) is ignored: the
// failed write is how the server notices.
sigset_t block_shutdown_signals() {
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

// A format flag's choices: "auto" (the chat template's) and the format names.
std::vector<std::string> with_auto(std::vector<std::string> names) {
  names.insert(names.begin(), "auto");
  return names;
}

std::string model_name(const ServeArgs& a) {
  if (!a.server.served_model_name.empty()) return a.server.served_model_name;
  std::filesystem::path p = std::filesystem::path(a.model.dir).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "models/tiny-main/"
  if (p.extension() == ".gguf") return p.stem().string();  // "SmolLM2-135M-Instruct.Q4_1"
  return p.filename().string();
}

int run_serve(ServeArgs a) {
  const sigset_t signals = block_shutdown_signals();
  apply_threads(a.model.threads);
  a.server.served_model_name = model_name(a);
  a.server.max_running = a.max_seqs * a.dp;
  const std::optional<ChatTemplate> chat = load_chat_template(a.model.dir, a.chat_template);
  if (a.tool_call_parser != "auto") a.server.tool_call_format = serve::tool_call_format_named(a.tool_call_parser);
  if (a.reasoning_parser != "auto") a.server.reasoning_format = serve::reasoning_format_named(a.reasoning_parser);
  a.server.chat_template_kwargs = chat_template_kwargs(a.template_kwargs);
  serve::ServerMetrics metrics;
  // Replicas share the host's cores: each engine thread gets 1/dp of the OpenMP threads.
  const int replica_threads = a.dp > 1 ? host_thread_share(a.dp) : 0;
  set_host_threads(replica_threads);  // this thread builds the engines: --tp ranks split the replica's share
  std::vector<std::unique_ptr<serve::EngineLoop>> loops;
  for (int i = 0; i < a.dp; ++i) {
    EngineOptions eo = engine_options(a.model);
    eo.block_size = a.block_size;
    eo.kv_memory_mb = a.kv_memory_mb;
    eo.max_batch_tokens = a.max_batch_tokens;
    eo.max_seqs = a.max_seqs;
    eo.enable_prefix_caching = !a.no_prefix_caching;
    eo.tensor_parallel = a.tp;
    eo.spec = spec_options(a.spec);
    auto engine = std::make_unique<Engine>(eo);
    loops.push_back(std::make_unique<serve::EngineLoop>(std::move(engine), metrics, replica_threads));
  }
  const int64_t kv_blocks = loops[0]->metrics().kv_blocks_total;
  const int64_t kv_tokens = kv_blocks * loops[0]->kv_block_size();
  const double kv_mib = double(kv_tokens * loops[0]->kv_bytes_per_token()) / (1 << 20);
  const int64_t context = loops[0]->config().max_position;
  serve::ReplicaRouter router(std::move(loops));
  serve::HttpServer server(router, chat ? &*chat : nullptr, metrics, a.server);
  const int port = server.bind();
  std::printf("twofold serve: listening on http://%s:%d\n", a.server.host.c_str(), port);
  std::printf("  model %s (%s), backend %s, context %lld tokens, chat template %s\n",
              a.server.served_model_name.c_str(), a.model.dir.c_str(), a.model.backend.c_str(), (long long)context,
              !a.chat_template.empty() ? a.chat_template.c_str()
              : chat                   ? "the model's"
                                       : "none (chat requests get 400; --chat-template FILE gives one)");
  std::printf("  KV cache: %lld blocks x %d tokens = %lld tokens (%s, %.1f MiB); %d running + %d waiting requests; "
              "%d connections%s\n",
              (long long)kv_blocks, a.block_size, (long long)kv_tokens, a.model.kv_dtype.c_str(), kv_mib,
              a.server.max_running, a.server.max_waiting, server.max_connections(),
              a.server.api_key.empty() ? "" : a.server.open_metrics ? "; API key required (not on /health, /metrics)"
                                                                    : "; API key required (not on /health)");
  if (chat && !a.server.chat_template_kwargs.empty())
    std::printf("  chat template kwargs: %s (a request's own win key by key)\n",
                a.server.chat_template_kwargs.dump().c_str());
  if (chat)
    std::printf("  tool calls: %s%s\n", serve::tool_call_format_name(server.tool_call_format()),
                server.tool_call_format() == serve::ToolCallFormat::None ? " (requests with tools get 400)"
                : a.tool_call_parser == "auto"                           ? " (the chat template's format)"
                                                                         : "");
  if (chat)
    std::printf("  reasoning: %s%s\n", serve::reasoning_format_name(server.reasoning_format()),
                server.reasoning_format() == serve::ReasoningFormat::None ? " (<think> blocks stay in content)"
                : a.reasoning_parser == "auto" ? " (the chat template knows </think>; <think> blocks go to reasoning_content)"
                                               : " (<think> blocks go to reasoning_content)");
  if (a.dp > 1 || a.tp > 1)
    std::printf("  parallel: %d data-parallel replica(s) (KV cache and --max-seqs per replica), %d tensor-parallel rank(s) each "
                "(KV MiB per rank)\n", a.dp, a.tp);
  std::fflush(stdout);

  std::thread watcher([&server, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "twofold serve: %s: refusing new requests, finishing %d in flight\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", server.n_in_flight());
    server.shutdown();
  });
  server.run();
  watcher.join();
  std::fprintf(stderr, "twofold serve: stopped\n");
  return 0;
}

}  // namespace

void add_serve(CLI::App& app, Runner& run) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* c = app.add_subcommand("serve", "OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)");
  add_model_args(c, a->model);
  serve::ServerOptions& s = a->server;
  c->add_option("--host", s.host, "Address to listen on")->capture_default_str();
  c->add_option("--port", s.port, "Port (0: any free port, printed at startup)")
      ->capture_default_str()
      ->check(CLI::Range(0, serve::kMaxPort));
  c->add_option("--api-key", s.api_key,
                 "Require 'Authorization: Bearer KEY' on every path but /health (default: none)");
  c->add_flag("--open-metrics", s.open_metrics,
              "With --api-key: serve /metrics without the key too (it shows load and token counts)");
  c->add_option("--served-model-name", s.served_model_name, "Model name in the API (default: the folder's name)");
  c->add_option("--max-waiting", s.max_waiting, "Requests admitted beyond --max-seqs before answering 429")
      ->capture_default_str()->check(non_negative_number());
  c->add_option("--max-body-bytes", s.max_body_bytes, "Larger request bodies get 413 (chunked ones too)")
      ->capture_default_str()->check(positive_number());
  c->add_option("--max-connections", s.max_connections, "Open connections (streams included); past it 503")
      ->capture_default_str()->check(positive_number());
  c->add_option("--listen-backlog", s.listen_backlog,
                "Connects the kernel queues before accept (capped by net.core.somaxconn)")
      ->capture_default_str()->check(positive_number());
  c->add_option("--grace-period", s.grace_s, "Seconds in-flight requests may finish after SIGTERM")
      ->capture_default_str()->check(non_negative_number());
  c->add_option("--max-seqs", a->max_seqs, "Sequences running at once")->capture_default_str()->check(positive_number());
  c->add_option("--max-batch-tokens", a->max_batch_tokens, "Tokens per engine step")->capture_default_str();
  c->add_option("--block-size", a->block_size, "Tokens per KV block")->capture_default_str();
  c->add_option("--kv-memory-mb", a->kv_memory_mb, "Cap on the KV cache size")->capture_default_str();
  c->add_flag("--no-prefix-caching", a->no_prefix_caching, "Do not reuse KV blocks of identical prompt prefixes");
  add_chat_template_arg(c, a->chat_template);
  add_chat_template_kwargs_arg(c, a->template_kwargs);
  c->add_option("--tool-call-parser", a->tool_call_parser,
                "How the model writes tool calls, taken out of chat output into 'tool_calls': auto (the format "
                "the chat template teaches), hermes (<tool_call>JSON</tool_call>: Qwen, Hermes), llama3-json "
                "(Llama 3.1-3.3), mistral ([TOOL_CALLS]: Mistral, Mixtral), none (requests with tools get 400)")
      ->capture_default_str()
      ->check(CLI::IsMember(with_auto(serve::tool_call_format_names())));
  c->add_option("--reasoning-parser", a->reasoning_parser,
                "Whether a chat answer's <think>...</think> block (Qwen3, QwQ, DeepSeek-R1) goes to "
                "'reasoning_content' instead of 'content': auto (when the chat template knows </think>), think (or "
                "vLLM's names qwen3, deepseek_r1), none")
      ->capture_default_str()
      ->check(CLI::IsMember(with_auto(serve::reasoning_format_names())));
  add_spec_args(c, a->spec);
  add_tp_arg(c, a->tp);
  c->add_option("--dp", a->dp, "Data-parallel engine replicas behind the server (requests go to the least loaded)")
      ->capture_default_str()->check(positive_number());
  c->callback([a, &run] { run = [a] { return run_serve(*a); }; });
}

}  // namespace tf::cli
