#include <nlohmann/json.hpp>

#include "tools/commands.h"

namespace tf::cli {

std::string json_dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tf::cli
