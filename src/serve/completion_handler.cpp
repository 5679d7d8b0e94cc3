// The generation endpoints; see completion_handler.h.
#include "serve/completion_handler.h"

#include <chrono>
#include <ctime>
#include <random>

#include "chat/chat_template.h"
#include "core/error.h"
#include "model/config.h"
#include "model/tokenizer/tokenizer.h"
#include "serve/api_error.h"
#include "serve/replica_router.h"
#include "serve/http_util.h"
#include "serve/metrics.h"
#include "serve/openai_response.h"

namespace tf::serve {
namespace {

using namespace std::chrono_literals;

// How long a stream waits for a token before writing an SSE comment; a client that went
// away while its request was queued is noticed by the write that follows.
constexpr auto kKeepAlive = 1s;

uint64_t random_u64() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

std::string new_id(Endpoint e) {
  static const char* hex = "0123456789abcdef";
  std::string id = e == Endpoint::Chat ? "chatcmpl-" : "cmpl-";
  for (int i = 0; i < 24; ++i) id += hex[random_u64() & 15];
  return id;
}

// The prompt as token ids. Chat: the model's template renders the messages (400 when there is
// none: a guessed template, as transformers used before 4.44, feeds the model markers it never
// saw), then the text is tokenized without adding special tokens, as Hugging Face's
// apply_chat_template does: the template already wrote BOS and the role markers, and the
// post-processor would add a second BOS. Completions: text is tokenized as HF's tokenizer(text) does (BOS if the
// tokenizer's post-processor adds one); token ids are used as given.
std::vector<int32_t> prompt_ids(const CompletionContext& ctx, const ApiRequest& r) {
  const Tokenizer& tok = ctx.loop.tokenizer();
  const char* param = prompt_param(r.endpoint);
  std::vector<int32_t> ids;
  if (r.endpoint == Endpoint::Chat) {
    if (!ctx.chat)
      bad_request(param, "this model has no chat template, so 'messages' cannot be turned into a prompt: start "
                         "the server with --chat-template FILE (examples/chatml.jinja is ChatML), or use "
                         "/v1/completions");
    std::string text;
    try {
      text = ctx.chat->render(r.messages, r.add_generation_prompt, r.tools, r.chat_template_kwargs);
    } catch (const tf::Error& e) {
      bad_request(param, std::string("cannot apply the model's chat template to 'messages': ") + e.what());
    }
    ids = tok.encode(text, /*add_special=*/false);
  } else if (r.prompt_is_ids) {
    ids = r.prompt_ids;
    const int64_t n_vocab = ctx.loop.config().n_vocab;
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] >= n_vocab)
        bad_request(param, "'prompt' token id " + std::to_string(ids[i]) + " (element " + std::to_string(i) +
                               ") is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
  } else {
    ids = tok.encode(r.prompt_text, /*add_special=*/true);
  }
  if (ids.empty()) bad_request(param, std::string("'") + param + "' is empty after tokenization");
  const int64_t pool_tokens = ctx.loop.kv_pool_tokens();
  if (int64_t(ids.size()) >= pool_tokens)
    bad_request(param, "the prompt is " + std::to_string(ids.size()) + " tokens but the KV cache holds only " +
                           std::to_string(pool_tokens) + " tokens");
  return ids;
}

// Everything one streamed response carries between calls of the content provider.
struct StreamState {
  std::shared_ptr<RequestStream> stream;
  std::shared_ptr<Admission::Slot> slot;  // given back when the response is destroyed
  ResponseMeta meta;
  Usage usage;
  size_t text_offset = 0;
  bool started = false;
};

// One call of the chunked content provider: waits for the next outputs (or a keep-alive
// tick) and writes them as SSE events; the finishing output adds the finish chunk, the
// usage chunk when asked for, and "data: [DONE]". Returns false when the client is gone.
bool pump(const CompletionContext& ctx, StreamState& st, httplib::DataSink& sink) {
  std::string data;
  if (!st.started && st.meta.endpoint == Endpoint::Chat)
    data += sse_event(stream_chunk(st.meta, ctx.loop.tokenizer(), ChunkPart{.first = true}));
  st.started = true;
  std::vector<RequestOutput> outs;
  if (!st.stream->wait(outs, kKeepAlive) && data.empty()) data = ": keep-alive\n\n";
  bool done = false;
  for (const RequestOutput& o : outs) {
    st.usage.completion_tokens += int32_t(o.new_token_ids.size());
    if (!o.text.empty() || !o.logprobs.empty()) {
      data += sse_event(stream_chunk(st.meta, ctx.loop.tokenizer(),
                                     ChunkPart{.text = o.text, .logprobs = o.logprobs, .text_offset = st.text_offset}));
      for (const SampledLogprobs& lp : o.logprobs) st.text_offset += ctx.loop.tokenizer().token_bytes(lp.sampled.id).size();
    }
    if (!o.finished) continue;
    done = true;
    const std::string error = st.stream->error();
    if (!error.empty()) {
      data += sse_event(ApiError(500, error, "server_error").to_json());
    } else {
      data += sse_event(stream_chunk(st.meta, ctx.loop.tokenizer(), ChunkPart{.finish = o.finish_reason}));
      if (st.meta.include_usage) data += sse_event(usage_chunk(st.meta, st.usage));
    }
    data += "data: [DONE]\n\n";
  }
  if (!data.empty() && !sink.write(data.data(), data.size())) {
    ctx.loop.abort(*st.stream);
    return false;
  }
  if (done) sink.done();
  return true;
}

void respond_streaming(const CompletionContext& ctx, httplib::Response& res, std::shared_ptr<StreamState> st) {
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [&ctx, st](size_t, httplib::DataSink& sink) { return pump(ctx, *st, sink); },
      // Called when the response is done with, whatever happened; a stream that did not
      // finish lost its client, so the engine stops working for it.
      [&ctx, st](bool) { ctx.loop.abort(*st->stream); });
}

void respond_whole(const CompletionContext& ctx, httplib::Response& res, StreamState& st) {
  std::string text;
  std::vector<SampledLogprobs> logprobs;
  FinishReason why = FinishReason::None;
  std::vector<RequestOutput> outs;
  while (why == FinishReason::None) {
    outs.clear();
    st.stream->wait(outs, kKeepAlive);
    for (RequestOutput& o : outs) {
      text += o.text;
      st.usage.completion_tokens += int32_t(o.new_token_ids.size());
      logprobs.insert(logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      if (o.finished) why = o.finish_reason;
    }
  }
  const std::string error = st.stream->error();
  if (!error.empty()) return send_error(res, ApiError(500, error, "server_error"));
  send_json(res, 200, full_response(st.meta, ctx.loop.tokenizer(), text, logprobs, why, st.usage));
}

}  // namespace

void handle_completion(const CompletionContext& ctx, Endpoint endpoint, const httplib::Request& req,
                       httplib::Response& res) {
  try {
    ApiRequest r = endpoint == Endpoint::Chat ? parse_chat_request(req.body) : parse_completion_request(req.body);
    // Unknown model: 404 with code model_not_found, as the OpenAI API answers it (not 400).
    if (r.model && *r.model != ctx.model_name)
      throw ApiError(404, "The model '" + *r.model + "' does not exist (this server serves '" + ctx.model_name + "')",
                     "invalid_request_error", "model", "model_not_found");
    const std::vector<int32_t> ids = prompt_ids(ctx, r);
    fit_max_tokens(r, int64_t(ids.size()), ctx.loop.config().max_position);
    if (!r.seed_given) r.sampling.seed = random_u64();

    auto st = std::make_shared<StreamState>();
    st->slot = ctx.admission.try_acquire();
    if (!st->slot) {
      ++ctx.metrics.rejected_queue_full;
      res.set_header("Retry-After", "1");
      throw ApiError(429, "the server is at capacity (its waiting queue is full); retry later", "requests",
                     std::nullopt, "rate_limit_exceeded");
    }
    try {
      st->stream = ctx.loop.submit(GenerateRequest{.prompt_ids = ids, .sampling = r.sampling, .priority = r.priority});
    } catch (const tf::Error& e) {
      bad_request(prompt_param(endpoint), e.what());
    }
    st->meta = ResponseMeta{.endpoint = endpoint, .id = new_id(endpoint), .created = int64_t(std::time(nullptr)),
                            .model = ctx.model_name, .logprobs = r.want_logprobs, .include_usage = r.include_usage};
    st->usage.prompt_tokens = int32_t(ids.size());
    if (r.stream) respond_streaming(ctx, res, st);
    else respond_whole(ctx, res, *st);
  } catch (const ApiError& e) {
    if (e.status() != 429) ++ctx.metrics.rejected_invalid;
    send_error(res, e);
  }
}

}  // namespace tf::serve
