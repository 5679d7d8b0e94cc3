// Errors the server answers with, shaped as the OpenAI API does:
//   HTTP <status>  {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// `param` names the request field at fault (null when no single field is), so a client can
// tell which of its inputs to fix.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <stdexcept>
#include <string>

namespace tf::serve {

// JSON text of a response; invalid UTF-8 (a token that ends mid-character, or client bytes
// quoted in an error message) is replaced rather than thrown on.
inline std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type, std::optional<std::string> param = std::nullopt,
           std::optional<std::string> code = std::nullopt)
      : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  nlohmann::json to_json() const {
    nlohmann::json e{{"message", what()}, {"type", type_}, {"param", nullptr}, {"code", nullptr}};
    if (param_) e["param"] = *param_;
    if (code_) e["code"] = *code_;
    return nlohmann::json{{"error", e}};
  }

 private:
  int status_;
  std::string type_;
  std::optional<std::string> param_, code_;
};

// 400 invalid_request_error naming the field.
[[noreturn]] inline void bad_request(const std::string& param, const std::string& message) {
  throw ApiError(400, message, "invalid_request_error", param);
}

}  // namespace tf::serve
