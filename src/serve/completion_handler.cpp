// The generation endpoints apart from the transport; see completion_handler.h.
#include "serve/completion_handler.h"

#include <ctime>
#include <random>

#include "chat/chat_template.h"
#include "core/error.h"
#include "model/config.h"
#include "model/tokenizer/tokenizer.h"
#include "serve/api_error.h"
#include "serve/replica_router.h"
#include "serve/tool_choice.h"
#include "serve/metrics.h"

namespace tf::serve {
namespace {

uint64_t random_u64() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

std::string new_id(const char* prefix) {
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += hex[random_u64() & 15];
  return id;
}

std::string new_call_id() { return new_id("call_"); }

// The prompt as token ids. Chat: the model's template renders the messages (400 when there is
// none: a guessed template, as transformers used before 4.44, feeds the model markers it never
// saw), then the text is tokenized without adding special tokens, as Hugging Face's
// apply_chat_template does: the template already wrote BOS and the role markers, and the
// post-processor would add a second BOS. Completions: text is tokenized as HF's tokenizer(text) does (BOS if the
// tokenizer's post-processor adds one); token ids are used as given. `opens_reasoning`: whether
// the rendered chat prompt leaves a <think> block open.
std::vector<int32_t> prompt_ids(const CompletionContext& ctx, const ApiRequest& r, bool& opens_reasoning) {
  const Tokenizer& tok = ctx.loop.tokenizer();
  const char* param = prompt_param(r.endpoint);
  std::vector<int32_t> ids;
  if (r.endpoint == Endpoint::Chat) {
    const std::string text = render_chat_prompt(ctx, r);
    ids = tok.encode(text, /*add_special=*/false);
    opens_reasoning = prompt_opens_reasoning(text);
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


}  // namespace

std::string render_chat_prompt(const CompletionContext& ctx, const ApiRequest& r) {
  if (!ctx.chat)
    bad_request("messages", "this model has no chat template, so 'messages' cannot be turned into a prompt: start "
                            "the server with --chat-template FILE (examples/chatml.jinja is ChatML), or use "
                            "/v1/completions");
  nlohmann::ordered_json kwargs = ctx.template_kwargs;
  for (const auto& [key, value] : r.chat_template_kwargs.items()) kwargs[key] = value;
  try {
    return ctx.chat->render_ordered(r.messages, r.add_generation_prompt, r.tools, kwargs);
  } catch (const tf::Error& e) {
    bad_request("messages", std::string("cannot apply the model's chat template to 'messages': ") + e.what());
  }
}

void check_served_model(const CompletionContext& ctx, const std::optional<std::string>& model) {
  // Unknown model: 404 with code model_not_found, as the OpenAI API answers it (not 400).
  if (model && *model != ctx.model_name)
    throw ApiError(404, "The model '" + model->substr(0, 200) + "' does not exist (this server serves '" +
                            ctx.model_name + "')",
                   "invalid_request_error", "model", "model_not_found");
}

std::unique_ptr<Completion> Completion::start(const CompletionContext& ctx, Endpoint endpoint, std::string_view body,
                                              std::function<void()> notify) {
  try {
    ApiRequest r = endpoint == Endpoint::Chat ? parse_chat_request(body) : parse_completion_request(body);
    check_served_model(ctx, r.model);
    if (!r.tools.is_null() && ctx.chat) {
      if (!ctx.chat->mentions("tools"))
        bad_request("tools", "the chat template in use never reads 'tools', so the model would not see them: "
                             "start the server with a --chat-template that lists tools, or send no 'tools'");
      if (ctx.tool_format == ToolCallFormat::None)
        bad_request("tools", "this model's chat template asks for no tool-call format twofold knows (hermes, "
                             "llama3-json), so calls could not be found in the output: start the server with "
                             "--tool-call-parser NAME, or send no 'tools'");
    }
    if (r.tool_required || r.tool_named) {  // parse_chat_request made sure there are tools
      if (r.sampling.output_format != OutputFormat::Text)
        bad_request("tool_choice", "'tool_choice' asks for a call, which 'response_format' or a guided_* field "
                                   "cannot also shape");
      const ToolCallOutput call =
          tool_call_output(r.tools, r.tool_named, ctx.tool_format, r.tool_required && r.parallel_tool_calls);
      r.sampling.output_format = OutputFormat::JsonSchema;
      r.sampling.json_schema = call.schema;
      r.sampling.json_before = call.before;
      r.sampling.json_after = call.after;
      r.sampling.json_between = call.between;
    }
    bool opens_reasoning = false;
    std::vector<int32_t> ids = prompt_ids(ctx, r, opens_reasoning);
    // The engine refuses these too, but its refusal names the prompt; this names the field.
    const int64_t n_vocab = ctx.loop.config().n_vocab;
    for (const auto& [token, bias] : r.sampling.logit_bias)
      if (token >= n_vocab)
        bad_request("logit_bias", "'logit_bias' token id " + std::to_string(token) + " is outside the vocabulary [0, " +
                                      std::to_string(n_vocab) + ")");
    fit_max_tokens(r, int64_t(ids.size()), ctx.loop.config().max_position);
    if (!r.seed_given) r.sampling.seed = random_u64();

    const ResponseMeta meta{.endpoint = endpoint,
                            .id = new_id(endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-"),
                            .created = int64_t(std::time(nullptr)),
                            .model = ctx.model_name, .logprobs = r.want_logprobs, .include_usage = r.include_usage};
    if (r.n > ctx.admission.limit())
      bad_request("n", "'n' is " + std::to_string(r.n) + " but this server takes " +
                           std::to_string(ctx.admission.limit()) + " requests at once (each choice is one)");
    std::unique_ptr<Completion> c(new Completion(ctx, meta, r.stream, int32_t(ids.size())));
    c->choices_.resize(size_t(r.n));
    if (!r.tools.is_null()) {
      c->tool_format_ = ctx.tool_format;
      c->max_calls_ = r.parallel_tool_calls ? SIZE_MAX : 1;
    }
    if (r.echo) {
      c->echo_ = true;
      c->echo_text_ = r.prompt_is_ids ? ctx.loop.tokenizer().decode(ids) : r.prompt_text;
      c->echo_ids_ = ids;
      for (int32_t id : ids) c->echo_bytes_ += ctx.loop.tokenizer().token_bytes(id).size();
    }
    // A JSON object output has no reasoning block: the constraint starts it with '{'.
    if (endpoint == Endpoint::Chat && ctx.reasoning_format == ReasoningFormat::Think &&
        r.sampling.output_format == OutputFormat::Text) {
      c->reasoning_ = true;
      c->reasoning_open_ = opens_reasoning;
    }
    // Every choice is its own engine request, with its own admission slot (all or none) and,
    // when sampled, its own seed (the request's seed + its index, so a given seed repeats all n).
    for (Choice& ch : c->choices_) {
      ch.slot = ctx.admission.try_acquire();
      if (!ch.slot) {
        ++ctx.metrics.rejected_queue_full;
        throw ApiError(429, "the server is at capacity (its waiting queue is full); retry later", "requests",
                       std::nullopt, "rate_limit_exceeded");
      }
      if (r.stream && c->tool_format_ != ToolCallFormat::None)
        ch.tool_stream.emplace(c->tool_format_, new_call_id, c->max_calls_);
      if (r.stream && c->reasoning_) ch.reasoning_stream.emplace(opens_reasoning);
    }
    try {
      for (size_t i = 0; i < c->choices_.size(); ++i) {
        SamplingParams sampling = r.sampling;
        sampling.seed += i;
        c->choices_[i].stream = ctx.loop.submit(
            GenerateRequest{.prompt_ids = ids, .sampling = std::move(sampling), .priority = r.priority}, notify);
      }
    } catch (const tf::Error& e) {  // the engine threads are stopping
      throw ApiError(503, std::string("the server is shutting down: ") + e.what(), "server_error", std::nullopt,
                     "shutting_down");
    }
    return c;
  } catch (const ApiError& e) {
    if (e.status() == 400 || e.status() == 404) ++ctx.metrics.rejected_invalid;
    throw;
  }
}

Completion::Completion(const CompletionContext& ctx, ResponseMeta meta, bool stream_mode, int32_t n_prompt)
    : ctx_(ctx), meta_(std::move(meta)), stream_mode_(stream_mode) {
  usage_.prompt_tokens = n_prompt;
}

Completion::~Completion() {
  for (Choice& ch : choices_) {
    if (!ch.stream) continue;
    ch.stream->detach_notify();
    if (!ch.done) ctx_.loop.abort(*ch.stream);
  }
}

CompletionUpdate Completion::poll() {
  if (finished_) return {};
  for (const Choice& ch : choices_)
    if (!ch.stream->decided()) return {};
  for (const Choice& ch : choices_) {
    if (!ch.stream->refused()) continue;
    finished_ = true;
    ++ctx_.metrics.rejected_invalid;
    return CompletionUpdate{.kind = CompletionUpdate::Kind::Error,
                            .error = ApiError(400, ch.stream->error(), "invalid_request_error",
                                              std::string(prompt_param(meta_.endpoint)))};
  }
  std::string bytes;
  bool all_done = true;
  for (size_t i = 0; i < choices_.size(); ++i) {
    Choice& ch = choices_[i];
    std::vector<RequestOutput> outs;
    ch.stream->take(outs);
    if (stream_mode_) {
      bytes += events_of(i, outs);
    } else {
      for (RequestOutput& o : outs) {
        count(i, o);
        ch.logprobs.insert(ch.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
        if (o.finished) ch.done = true, ch.finish = o.finish_reason;
      }
    }
    all_done = all_done && ch.done;
  }
  if (!all_done && bytes.empty() && (started_ || !stream_mode_)) return {};
  started_ = true;
  finished_ = all_done;
  if (stream_mode_) {
    if (all_done) {
      bool failed = false;
      for (const Choice& ch : choices_) failed = failed || !ch.stream->error().empty();
      if (meta_.include_usage && !failed) bytes += sse_event(usage_chunk(meta_, final_usage()));
      bytes += "data: [DONE]\n\n";
    }
    return CompletionUpdate{.kind = CompletionUpdate::Kind::Events, .bytes = std::move(bytes), .finished = all_done};
  }
  for (const Choice& ch : choices_) {
    const std::string error = ch.stream->error();
    if (error.empty()) continue;
    const ApiError e(500, error, "server_error");
    return CompletionUpdate{.kind = CompletionUpdate::Kind::Body, .bytes = dump(e.to_json()), .status = 500,
                            .finished = true};
  }
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < choices_.size(); ++i) out.push_back(whole_choice(i));
  return CompletionUpdate{.kind = CompletionUpdate::Kind::Body,
                          .bytes = dump(full_response(meta_, std::move(out), final_usage())), .finished = true};
}

void Completion::count(size_t index, const RequestOutput& o) {
  Choice& ch = choices_[index];
  ch.text += o.text;
  ch.ids.insert(ch.ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
  usage_.completion_tokens += int32_t(o.new_token_ids.size());
  if (index == 0 && o.n_cached_prompt_tokens >= 0) usage_.cached_tokens = o.n_cached_prompt_tokens;
  if (!o.prompt_logprobs.empty()) ch.prompt_logprobs = o.prompt_logprobs;
}

EchoedPrompt Completion::echoed(const Choice& ch) const {
  return EchoedPrompt{.text = echo_text_, .ids = echo_ids_,
                      .logprobs = meta_.logprobs ? std::span<const SampledLogprobs>(ch.prompt_logprobs)
                                                 : std::span<const SampledLogprobs>(),
                      .token_bytes = echo_bytes_};
}

Usage Completion::final_usage() const {
  Usage u = usage_;
  if (meta_.endpoint != Endpoint::Chat) return u;
  u.reasoning_tokens = 0;
  if (!reasoning_) return u;
  const Tokenizer& tok = ctx_.loop.tokenizer();
  for (const Choice& ch : choices_) {
    std::vector<std::string> bytes;
    bytes.reserve(ch.ids.size());
    for (int32_t id : ch.ids) bytes.push_back(tok.token_bytes(id));
    u.reasoning_tokens += reasoning_token_count(ch.text, reasoning_open_, bytes);
  }
  return u;
}

// The SSE events of choice `index` for `outs`: the chat role chunk before anything else, a
// chunk per output with text or logprobs, and at its finish the finish events.
std::string Completion::events_of(size_t index, std::vector<RequestOutput>& outs) {
  const Tokenizer& tok = ctx_.loop.tokenizer();
  Choice& ch = choices_[index];
  const int i = int(index);
  std::string data;
  if (!ch.started && meta_.endpoint == Endpoint::Chat)
    data += sse_event(stream_chunk(meta_, tok, ChunkPart{.index = i, .first = true}));
  ch.started = true;
  for (const RequestOutput& o : outs) {
    count(index, o);
    if (echo_ && !ch.echoed) {  // the prompt first (its logprobs came with this first output)
      ch.echoed = true;
      const EchoedPrompt e = echoed(ch);
      data += sse_event(stream_chunk(meta_, tok, ChunkPart{.index = i, .echo = &e}));
      ch.text_offset = echo_bytes_;
    }
    ReasoningSplit piece = ch.reasoning_stream ? ch.reasoning_stream->feed(o.text) : ReasoningSplit{.content = o.text};
    const std::string text = ch.tool_stream ? ch.tool_stream->feed(piece.content) : piece.content;
    if (!text.empty() || !piece.reasoning.empty() || !o.logprobs.empty()) {
      data += sse_event(stream_chunk(meta_, tok, ChunkPart{.index = i, .text = text, .reasoning = std::move(piece.reasoning),
                                                          .logprobs = o.logprobs, .text_offset = ch.text_offset}));
      for (const SampledLogprobs& lp : o.logprobs) ch.text_offset += tok.token_bytes(lp.sampled.id).size();
    }
    if (!o.finished) continue;
    ch.done = true;
    data += finish_events(index, o.finish_reason);
    break;
  }
  return data;
}

// The end of choice `index`'s stream: the reasoning and content its parsers still held and
// its calls, then its finish chunk (or an error event).
std::string Completion::finish_events(size_t index, FinishReason why) {
  const Tokenizer& tok = ctx_.loop.tokenizer();
  Choice& ch = choices_[index];
  const int i = int(index);
  const std::string error = ch.stream->error();
  if (!error.empty()) return sse_event(ApiError(500, error, "server_error").to_json());
  std::string data;
  ReasoningSplit held = ch.reasoning_stream ? ch.reasoning_stream->finish() : ReasoningSplit{};
  ParsedOutput rest{.content = std::move(held.content)};
  if (ch.tool_stream) {
    std::string sendable = ch.tool_stream->feed(rest.content);
    rest = ch.tool_stream->finish();
    rest.content = sendable + rest.content;
  }
  if (!rest.content.empty() || !held.reasoning.empty())
    data += sse_event(stream_chunk(meta_, tok, ChunkPart{.index = i, .text = rest.content, .reasoning = held.reasoning}));
  for (size_t k = 0; k < rest.calls.size(); ++k)
    data += sse_event(stream_chunk(meta_, tok, ChunkPart{.index = i, .call = &rest.calls[k], .call_index = int(k)}));
  data += sse_event(stream_chunk(meta_, tok, ChunkPart{.index = i, .finish = why,
                                                       .finish_with_tool_calls = !rest.calls.empty()}));
  return data;
}

// Choice `index` of a whole response: its reasoning split off, then its calls taken out.
nlohmann::json Completion::whole_choice(size_t index) {
  Choice& ch = choices_[index];
  ParsedOutput parsed{.content = ch.text};
  std::optional<std::string> reasoning;
  if (reasoning_) {
    ReasoningSplit split = split_reasoning(parsed.content, reasoning_open_);
    reasoning = std::move(split.reasoning);
    parsed.content = std::move(split.content);
  }
  if (tool_format_ != ToolCallFormat::None)
    parsed = parse_tool_calls(tool_format_, parsed.content, new_call_id, max_calls_);
  const EchoedPrompt e = echoed(ch);
  return response_choice(meta_, ctx_.loop.tokenizer(), int(index), parsed.content, ch.logprobs, ch.finish,
                         parsed.calls, reasoning, echo_ ? &e : nullptr);
}

}  // namespace tf::serve
