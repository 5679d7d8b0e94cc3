#include "core/split.h"

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

}  // namespace tf
