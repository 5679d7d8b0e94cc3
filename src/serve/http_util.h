// Small helpers for writing JSON and OpenAI-style errors into cpp-httplib responses.
#pragma once

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "serve/api_error.h"
#include "serve/openai_response.h"

namespace tf::serve {

inline void send_json(httplib::Response& res, int status, const nlohmann::json& j) {
  res.status = status;
  res.set_content(dump(j), "application/json");
}

inline void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), e.to_json()); }

}  // namespace tf::serve
