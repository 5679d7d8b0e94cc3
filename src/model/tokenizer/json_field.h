// Reading tokenizer.json fields with errors that name the file and the field at fault:
// "models/x/tokenizer.json: pre_tokenizer.pretokenizers[1].type: expected a string".
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "model/tokenizer/id_limit.h"

namespace tf::tok {

using json = nlohmann::json;

// Where a JSON value sits: the file and the dotted field path inside it.
struct JsonAt {
  std::string file;
  std::string field;

  JsonAt operator/(std::string_view key) const {
    return {file, field.empty() ? std::string(key) : field + "." + std::string(key)};
  }
  JsonAt operator[](size_t i) const { return {file, field + "[" + std::to_string(i) + "]"}; }

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    tf::fail("{}: {}: {}", file, field.empty() ? "(top level)" : field,
             fmt::format(f, std::forward<Args>(args)...));
  }
};

// obj[key]; fails unless obj is an object holding key.
inline const json& json_need(const json& obj, std::string_view key, const JsonAt& at) {
  if (!obj.is_object()) at.fail("expected an object");
  auto it = obj.find(key);
  if (it == obj.end()) (at / key).fail("missing");
  return *it;
}

// obj[key] or nullptr when absent (or obj[key] is null).
inline const json* json_find(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

inline std::string json_need_string(const json& obj, std::string_view key, const JsonAt& at) {
  const json& v = json_need(obj, key, at);
  if (!v.is_string()) (at / key).fail("expected a string, got {}", v.type_name());
  return v.get<std::string>();
}

inline bool json_opt_bool(const json& obj, std::string_view key, bool dflt, const JsonAt& at) {
  const json* v = json_find(obj, key);
  if (!v) return dflt;
  if (!v->is_boolean()) (at / key).fail("expected true or false, got {}", v->type_name());
  return v->get<bool>();
}

inline int64_t json_need_int(const json& v, const JsonAt& at) {
  if (!v.is_number_integer()) at.fail("expected an integer, got {}", v.type_name());
  return v.get<int64_t>();
}

// A token id of the file: a non-negative integer below `ids.limit()`.
inline int32_t json_need_id(const json& v, const JsonAt& at, IdLimit ids) {
  const int64_t id = json_need_int(v, at);
  if (id < 0) at.fail("token id {} is negative", id);
  if (id >= ids.limit())
    at.fail("token id {} is out of range: the file defines {} tokens, so ids must be below {}", id,
            ids.n_tokens, ids.limit());
  return int32_t(id);
}

// The "type" of a component object (normalizer, pre_tokenizer, decoder, ...).
inline std::string json_type(const json& obj, const JsonAt& at) { return json_need_string(obj, "type", at); }

}  // namespace tf::tok
