// POST /v1/completions and /v1/chat/completions apart from the transport: request JSON ->
// prompt ids -> engine -> one JSON response or Server-Sent Events ending in "data: [DONE]".
//
// Order of work, cheapest refusal first: parse and validate the fields (400 naming the
// field), check the model name (404), render the chat template and tokenize (400 on the
// prompt), fit max_tokens to the context (400), take an admission slot per choice (n of
// them, 429), submit one engine request per choice (the engine's own refusal comes back
// through poll() as a 400; a server shutting down answers 503).
//
// The HTTP session drives a Completion: it calls poll() each time the engine's `notify`
// fires and writes what poll() returns. Destroying a Completion that has not finished (its
// client went away) aborts its requests, which frees their KV blocks at once, and gives back
// their admission slots.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "serve/admission.h"
#include "serve/api_error.h"
#include "serve/openai_protocol.h"
#include "serve/openai_response.h"
#include "serve/reasoning.h"
#include "serve/tool_calls.h"

namespace tf {
class ChatTemplate;
}

namespace tf::serve {

class ReplicaRouter;
class RequestStream;
class ServerMetrics;

struct CompletionContext {
  ReplicaRouter& loop;
  const ChatTemplate* chat;  // null: the model has no chat template (chat requests get 400)
  ServerMetrics& metrics;
  Admission& admission;
  std::string model_name;
  // How the model writes tool calls (None: requests with tools get 400 naming `tools`).
  ToolCallFormat tool_format = ToolCallFormat::None;
  // Think: chat output's <think> block goes to reasoning_content (reasoning.h).
  ReasoningFormat reasoning_format = ReasoningFormat::None;
  // Chat template variables of every render (a request's own win key by key).
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
};

// A chat request's messages rendered with the chat template (400 naming 'messages' when the
// model has none or the render fails): the text its prompt ids are tokenized from.
std::string render_chat_prompt(const CompletionContext& ctx, const ApiRequest& r);
// 404 model_not_found unless `model` is absent or the served model's name.
void check_served_model(const CompletionContext& ctx, const std::optional<std::string>& model);

// What the transport sends next.
struct CompletionUpdate {
  enum class Kind : uint8_t {
    None,    // nothing yet
    Error,   // `error` is the whole answer (the engine refused the request)
    Events,  // `bytes`: Server-Sent Events to append to the stream
    Body,    // `bytes`: the whole JSON response, status `status`
  };
  Kind kind = Kind::None;
  std::optional<ApiError> error;
  std::string bytes;
  int status = 200;
  bool finished = false;  // Events: the stream ended with "data: [DONE]"; Body: always
};

class Completion {
 public:
  // Everything up to and including the submission to the engine (see the file comment).
  // `notify` is called from an engine thread whenever poll() has news; it must be cheap.
  // Throws ApiError.
  static std::unique_ptr<Completion> start(const CompletionContext& ctx, Endpoint endpoint, std::string_view body,
                                           std::function<void()> notify);
  ~Completion();  // aborts the requests that have not finished; gives back their slots
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  bool streaming() const { return stream_mode_; }
  // Takes what the engine produced since the last call. Call after each notify.
  CompletionUpdate poll();
  bool finished() const { return finished_; }

 private:
  // One of the request's n choices: its own engine request (and admission slot), parsers and,
  // for a whole response, what has arrived so far.
  struct Choice {
    std::shared_ptr<Admission::Slot> slot;
    std::shared_ptr<RequestStream> stream;
    std::optional<ToolCallStream> tool_stream;         // streaming chat with tools
    std::optional<ReasoningStream> reasoning_stream;   // streaming chat with a reasoning format
    size_t text_offset = 0;  // streaming: bytes of text sent so far (completions logprobs' text_offset)
    bool started = false;    // streaming: its first chunk (the chat role) went out
    bool done = false;       // its finished output arrived
    FinishReason finish = FinishReason::None;
    std::string text;                       // the output so far (streamed or not)
    std::vector<int32_t> ids;               // its tokens
    std::vector<SampledLogprobs> logprobs;  // whole response
    std::vector<SampledLogprobs> prompt_logprobs;  // echo with logprobs: from its first output
    bool echoed = false;     // streaming: the echoed prompt went out
  };

  Completion(const CompletionContext& ctx, ResponseMeta meta, bool stream_mode, int32_t n_prompt);
  std::string events_of(size_t index, std::vector<RequestOutput>& outs);
  std::string finish_events(size_t index, FinishReason why);
  nlohmann::json whole_choice(size_t index);
  // Takes an output's tokens and text into choice `index` and the usage.
  void count(size_t index, const RequestOutput& o);
  // The usage with the choices' reasoning tokens (chat).
  Usage final_usage() const;

  const CompletionContext& ctx_;
  std::vector<Choice> choices_;
  ResponseMeta meta_;
  Usage usage_;
  bool stream_mode_ = false;
  bool started_ = false;   // the first poll after the engine took the requests happened
  bool finished_ = false;
  // Chat with tools: the output's tool calls are taken out of the text (whole: at the end).
  ToolCallFormat tool_format_ = ToolCallFormat::None;
  size_t max_calls_ = SIZE_MAX;  // parallel_tool_calls false: 1
  // Chat with a reasoning format: the output's reasoning is split off (streaming: as it comes),
  // before the tool calls are looked for in the rest. reasoning_open_: the prompt opened it.
  bool reasoning_ = false;
  bool reasoning_open_ = false;
  // Completions with echo: the prompt (its text and ids) comes back before each choice's output.
  bool echo_ = false;
  std::string echo_text_;
  std::vector<int32_t> echo_ids_;
  size_t echo_bytes_ = 0;  // the ids' token bytes
  EchoedPrompt echoed(const Choice& ch) const;
};

}  // namespace tf::serve
