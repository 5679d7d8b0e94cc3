// Request routing, limits and head checks; see http_request.h.
#include "serve/http_request.h"

#include <boost/asio/error.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <cctype>

namespace tf::serve {
namespace {

namespace asio = boost::asio;

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// application/json, or a structured syntax suffix like application/vnd.x+json; parameters
// (charset) are ignored. An absent Content-Type is taken as JSON, as FastAPI does.
bool is_json_media_type(std::string_view value) {
  const std::string type = lower(trim(value.substr(0, value.find(';'))));
  if (type == "application/json") return true;
  return type.rfind("application/", 0) == 0 && type.size() > 5 && type.compare(type.size() - 5, 5, "+json") == 0;
}

// Compares without an early exit, so the time taken does not tell how much of a guessed key
// was right.
bool same_key(std::string_view given, std::string_view key) {
  if (given.size() != key.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ key[i]);
  return diff == 0;
}

bool needs_key(Route r, const RequestRules& rules) {
  if (rules.api_key.empty() || r == Route::Health) return false;
  return !(r == Route::Metrics && rules.open_metrics);
}

std::string limit_text(size_t bytes) { return std::to_string(bytes) + " bytes"; }

}  // namespace

namespace {

struct RouteEntry {
  std::string_view path;
  http::verb method;
  Route route;
};
constexpr RouteEntry kRoutes[] = {
    {"/v1/completions", http::verb::post, Route::Completions},
    {"/v1/chat/completions", http::verb::post, Route::Chat},
    {"/v1/models", http::verb::get, Route::Models},
    {"/health", http::verb::get, Route::Health},
    {"/metrics", http::verb::get, Route::Metrics},
    {"/tokenize", http::verb::post, Route::Tokenize},
    {"/detokenize", http::verb::post, Route::Detokenize},
};

const RouteEntry* entry_of(std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  for (const RouteEntry& e : kRoutes)
    if (e.path == path) return &e;
  return nullptr;
}

}  // namespace

Route route_of(http::verb method, std::string_view target) {
  const RouteEntry* e = entry_of(target);
  if (!e) return Route::NotFound;
  return e->method == method ? e->route : Route::WrongMethod;
}

const char* allowed_method(std::string_view target) {
  const RouteEntry* e = entry_of(target);
  return e && e->method == http::verb::post ? "POST" : "GET";
}

bool is_generation(Route r) { return r == Route::Completions || r == Route::Chat; }

void limit_parser(RequestParser& p, const RequestRules& rules) {
  p.header_limit(uint32_t(std::min<size_t>(rules.max_header_bytes, UINT32_MAX)));
  p.body_limit(uint64_t(rules.max_body_bytes));
}

std::optional<ApiError> check_head(const HttpRequest& head, Route route, const RequestRules& rules, bool draining) {
  if (draining)
    return ApiError(503, "the server is shutting down", "server_error", std::nullopt, "shutting_down");
  if (needs_key(route, rules)) {
    const auto auth = head.find(http::field::authorization);
    const std::string_view given = auth == head.end() ? std::string_view() : std::string_view(auth->value());
    const std::string_view prefix = "Bearer ";
    if (given.size() < prefix.size() || lower(given.substr(0, prefix.size())) != "bearer " ||
        !same_key(trim(given.substr(prefix.size())), rules.api_key))
      return ApiError(401, "missing or incorrect API key: send the header 'Authorization: Bearer <key>'",
                      "invalid_request_error", std::nullopt, "invalid_api_key");
  }
  const std::string target(head.target());
  if (route == Route::NotFound)
    return ApiError(404, "not found: " + std::string(head.method_string()) + " " + target.substr(0, 200),
                    "invalid_request_error", std::nullopt, "not_found");
  if (route == Route::WrongMethod)
    return ApiError(405, "method not allowed: " + std::string(head.method_string()) + " " + target.substr(0, 200),
                    "invalid_request_error", std::nullopt, "method_not_allowed");
  if (is_generation(route)) {
    const auto type = head.find(http::field::content_type);
    if (type != head.end() && !is_json_media_type(type->value()))
      return ApiError(415,
                      "the request body must be JSON (Content-Type: application/json), got Content-Type '" +
                          std::string(type->value().substr(0, 200)) + "'",
                      "invalid_request_error", std::nullopt, "unsupported_media_type");
    const auto enc = head.find(http::field::content_encoding);
    if (enc != head.end() && lower(trim(enc->value())) != "identity")
      return ApiError(415, "Content-Encoding '" + std::string(enc->value().substr(0, 200)) +
                               "' is not supported: send the body uncompressed",
                      "invalid_request_error", std::nullopt, "unsupported_media_type");
  }
  return std::nullopt;
}

ApiError parse_failure(const boost::beast::error_code& ec, const RequestRules& rules) {
  if (ec == http::error::body_limit)
    return ApiError(413, "the request body is larger than the limit of " + limit_text(rules.max_body_bytes) +
                             " (--max-body-bytes)", "invalid_request_error", std::nullopt, "request_too_large");
  if (ec == http::error::header_limit)
    return ApiError(431, "the request line and headers are larger than the limit of " +
                             limit_text(rules.max_header_bytes), "invalid_request_error", std::nullopt,
                    "request_header_fields_too_large");
  if (ec == http::error::buffer_overflow)
    return ApiError(400, "malformed HTTP request: a line of the request is too long", "invalid_request_error");
  return ApiError(400, "malformed HTTP request: " + ec.message(), "invalid_request_error");
}

bool is_disconnect(const boost::beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::connection_aborted ||
         ec == asio::error::broken_pipe || ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor ||
         ec == asio::error::not_connected || ec == asio::error::timed_out;
}

}  // namespace tf::serve
