// libFuzzer harness: the bytes a client sends on one connection, parsed as the server parses
// them (src/serve/http_session.cpp): Beast's read_header and read over the session's buffer
// with the server's limits (limit_parser), the head checks (check_head), and for the two
// generation routes the body decoded into a request (parse_*_request, fit_max_tokens).
// Several requests per connection (keep-alive, pipelining), as a session loops.
//
// Input: byte 0 chooses how many bytes each socket read hands over (1..64, as a request
// arrives in pieces) and whether /metrics is open; the rest is the byte stream. Any
// exception other than the ApiError answers, or any sanitizer report, is a bug.
#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "serve/api_error.h"
#include "serve/http_request.h"
#include "serve/openai_protocol.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using namespace tf::serve;

// A SyncReadStream over the input that returns at most `step` bytes per read, then end of
// file: what a socket gives the session.
class PieceStream {
 public:
  PieceStream(std::string_view in, size_t step) : in_(in), step_(step) {}
  template <typename Buffers>
  size_t read_some(const Buffers& buffers, beast::error_code& ec) {
    if (in_.empty()) {
      ec = asio::error::eof;
      return 0;
    }
    const size_t n = asio::buffer_copy(buffers, asio::buffer(in_.data(), std::min(step_, in_.size())));
    in_.remove_prefix(n);
    ec = {};
    return n;
  }
  template <typename Buffers>
  size_t read_some(const Buffers& buffers) {
    beast::error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw beast::system_error(ec);
    return n;
  }

 private:
  std::string_view in_;
  size_t step_;
};

void answer(const ApiError& e) { (void)dump(e.to_json()); }

void decode(Route route, const std::string& body) {
  try {
    ApiRequest r = route == Route::Chat ? parse_chat_request(body) : parse_completion_request(body);
    fit_max_tokens(r, 1 + int64_t(body.size() % 1500), 1024);
  } catch (const ApiError& e) {
    answer(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const RequestRules rules{.max_body_bytes = 4096, .max_header_bytes = 2048, .api_key = "k",
                           .open_metrics = (data[0] & 0x80) != 0};
  PieceStream stream({reinterpret_cast<const char*>(data + 1), size - 1}, 1 + (data[0] & 0x3f));
  beast::flat_buffer buffer(rules.max_header_bytes + (64 << 10));  // the session's buffer bound
  for (int n_requests = 0; n_requests < 16; ++n_requests) {
    RequestParser parser;
    limit_parser(parser, rules);
    beast::error_code ec;
    http::read_header(stream, buffer, parser, ec);
    if (ec) {
      if (!is_disconnect(ec)) answer(parse_failure(ec, rules));
      return 0;
    }
    const Route route = route_of(parser.get().method(), parser.get().target());
    (void)allowed_method(parser.get().target());
    if (std::optional<ApiError> refusal = check_head(parser.get(), route, rules, /*draining=*/false)) {
      answer(*refusal);
      if (!parser.is_done()) return 0;  // the session closes: the body is never read
      continue;
    }
    if (!parser.is_done()) http::read(stream, buffer, parser, ec);
    if (ec) {
      if (!is_disconnect(ec)) answer(parse_failure(ec, rules));
      return 0;
    }
    HttpRequest req = parser.release();
    if (req.body().size() > rules.max_body_bytes) __builtin_trap();  // the limit must hold
    if (is_generation(route)) decode(route, req.body());
    if (!req.keep_alive()) return 0;
  }
  return 0;
}
