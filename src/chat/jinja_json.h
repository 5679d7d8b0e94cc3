// Between JSON and template values: nlohmann::json (or ordered_json, which keeps key order as
// Python's json.loads does) into Values, and Values out as text the way Python's json.dumps
// writes them, which is what Hugging Face's `tojson` filter calls.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "chat/jinja_value.h"

namespace tf::jinja {

// Works for nlohmann::json and nlohmann::ordered_json. Integers beyond int64 fail.
template <typename Json>
Value from_json(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value(nullptr);
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u > uint64_t(INT64_MAX)) fail_eval("integer {} is too large", u);
      return Value(int64_t(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value d = Value::dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.as_dict().items.emplace_back(it.key(), from_json(it.value()));
      return d;
    }
    default: fail_eval("cannot use JSON value of type {} in a template", j.type_name());
  }
}

// Options of Python's json.dumps. indent: none for one line; otherwise the text for one level
// (json.dumps(indent=2) is "  "). Separators default, as in Python, to ", " and ": " on one
// line and "," and ": " when indenting.
struct DumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;
  std::optional<std::string> item_separator;
  std::optional<std::string> key_separator;
  bool sort_keys = false;
};

std::string dumps(const Value& v, const DumpOptions& opts = {});

}  // namespace tf::jinja
