// The rules every HTTP request to `twofold serve` is held to, apart from the sockets: how the
// request bytes are parsed (Boost.Beast's HTTP/1.1 parser with our size limits), which route
// a method and path go to, and what is refused from the request head alone, before a byte
// of the body is read:
//
//   check_head, in this order: draining -> 503; a missing or wrong API key -> 401 (on every
//   path but /health, and /metrics with open_metrics; unknown paths too, so they tell a
//   client without the key nothing); unknown path -> 404; known path, wrong method -> 405
//   (Allow header); a generation body that is not JSON (Content-Type other than
//   application/json or application/*+json, or any Content-Encoding) -> 415.
//   The parser (parse_failure): a declared Content-Length over max_body_bytes -> 413 before
//   the body is read; a request line and headers over max_header_bytes -> 431; anything
//   malformed -> 400.
//
// The body limit holds on every transfer encoding: the parser refuses a Content-Length over
// the limit before reading the body, and a chunked body as soon as its chunk sizes add up
// past it (each chunk's size is checked before its data is read), so at most max_body_bytes
// of body are ever buffered. The session (http_session.cpp) and the fuzz harness
// (tests/fuzz/fuzz_http_request.cpp) both use these functions, so the harness parses
// requests exactly as the server does.
#pragma once

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "serve/api_error.h"

namespace tf::serve {

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;
using RequestParser = http::request_parser<http::string_body>;

enum class Route : uint8_t { Completions, Chat, Models, Health, Metrics, Tokenize, Detokenize, NotFound, WrongMethod };

// What check_head() needs to know about the server.
struct RequestRules {
  size_t max_body_bytes = 8u << 20;
  size_t max_header_bytes = 16u << 10;  // request line + headers
  std::string api_key;                  // non-empty: needed on everything but /health (and /metrics if open)
  bool open_metrics = false;            // /metrics answers without the API key
};

// The route of a method and request target (the query string is ignored).
Route route_of(http::verb method, std::string_view target);
// "POST" or "GET": the method the target's path answers (for 405's Allow header).
const char* allowed_method(std::string_view target);
bool is_generation(Route r);

// Applies the limits to a fresh parser (one parser per request, as Beast requires).
void limit_parser(RequestParser& p, const RequestRules& rules);

// The refusal a request head earns, or nothing when the body may be read. Checked in the
// order of the file comment.
std::optional<ApiError> check_head(const HttpRequest& head, Route route, const RequestRules& rules, bool draining);

// The answer to bytes the parser refused (`ec` from Beast): 413 naming the limit, 431, or
// 400 naming what was malformed.
ApiError parse_failure(const boost::beast::error_code& ec, const RequestRules& rules);

// True when `ec` means the peer went away (or never sent a request) rather than sending bad
// bytes: such a connection is closed without an answer.
bool is_disconnect(const boost::beast::error_code& ec);

}  // namespace tf::serve
