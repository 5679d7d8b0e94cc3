#include "core/split.h"

#include <charconv>

#include "core/error.h"

namespace tf {

std::vector<std::string> split_list(std::string_view s, char sep) {
  std::vector<std::string> out;
  while (!s.empty()) {
    const size_t end = s.find(sep);
    const std::string_view item = s.substr(0, end);
    if (!item.empty()) out.emplace_back(item);
    if (end == std::string_view::npos) break;
    s.remove_prefix(end + 1);
  }
  return out;
}

std::optional<int64_t> parse_int(std::string_view s, int64_t min, int64_t max) {
  int64_t n = 0;
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, n);
  if (ec != std::errc() || ptr != end || n < min || n > max) return std::nullopt;
  return n;
}

std::vector<int64_t> parse_int_list(std::string_view s, std::string_view flag, int64_t min, int64_t max) {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(s)) {
    if (const auto n = parse_int(item, min, max)) {
      out.push_back(*n);
      continue;
    }
    if (max == INT64_MAX) fail("{}: '{}' is not an integer >= {}", flag, item, min);
    fail("{}: '{}' is not an integer from {} to {}", flag, item, min, max);
  }
  if (out.empty()) fail("{}: expected a comma-separated list of integers, got '{}'", flag, s);
  return out;
}

}  // namespace tf
