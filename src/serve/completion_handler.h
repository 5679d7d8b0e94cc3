// POST /v1/completions and /v1/chat/completions: request JSON -> prompt ids -> engine ->
// one JSON response or a Server-Sent Events stream ending in "data: [DONE]".
//
// Order of work, cheapest refusal first: parse and validate the fields (400 naming the
// field), check the model name (404), render the chat template and tokenize (400 on the
// prompt), fit max_tokens to the context (400), take an admission slot (429), submit to
// the engine thread (its own refusals come back as 400).
#pragma once

#include <httplib.h>

#include <string>

#include "serve/admission.h"
#include "serve/openai_protocol.h"

namespace tf {
class ChatTemplate;
}

namespace tf::serve {

class ReplicaRouter;
class ServerMetrics;

struct CompletionContext {
  ReplicaRouter& loop;
  const ChatTemplate* chat;  // null: the model has no chat template (chat requests get 400)
  ServerMetrics& metrics;
  Admission& admission;
  std::string model_name;
};

void handle_completion(const CompletionContext& ctx, Endpoint endpoint, const httplib::Request& req,
                       httplib::Response& res);

}  // namespace tf::serve
