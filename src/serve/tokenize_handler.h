// POST /tokenize and /detokenize (vLLM's and llama.cpp's servers have them): a prompt or chat
// messages to the token ids a generation request would start from, and token ids back to text.
//   /tokenize    {"prompt": text} or {"messages": [...]} (with add_generation_prompt,
//                chat_template_kwargs and tools as in a chat request), "add_special_tokens"
//                (default: true for a prompt, as a completion request tokenizes it; false for
//                messages, whose template writes the special tokens), "model" (optional)
//                -> {"count", "max_model_len", "tokens"}
//   /detokenize  {"tokens": [ids]}, "model" (optional) -> {"prompt": text}
// Errors are ApiErrors naming the field (400), an unknown model 404.
#pragma once

#include <string>
#include <string_view>

#include "serve/completion_handler.h"

namespace tf::serve {

std::string tokenize_response(const CompletionContext& ctx, std::string_view body);
std::string detokenize_response(const CompletionContext& ctx, std::string_view body);

}  // namespace tf::serve
