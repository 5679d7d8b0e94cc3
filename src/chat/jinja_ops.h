// Operators and member access with Python's semantics, as jinja2's immutable sandbox applies
// them: arithmetic, `in`, attribute and item lookup (x.y tries the attribute, then the key;
// x[y] the key, then the attribute; a miss is Undefined, not an error), slicing, and the
// methods of str, dict and list. Methods that would modify a list or dict fail when called,
// as the sandbox forbids them.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja_value.h"

namespace tf::jinja {

Value binary_op(std::string_view op, const Value& a, const Value& b);  // + - * / // % **
Value negate(const Value& v);
Value unary_plus(const Value& v);
bool contains(const Value& container, const Value& item);  // item in container

Value get_attr(const Value& obj, const std::string& name);  // obj.name
Value get_item(const Value& obj, const Value& key);         // obj[key]
// obj[start:stop:step]; missing parts are Undefined or None.
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// The arguments of a call bound to parameter names, Python style: positional ones in order,
// then keywords by name. Fails on too many, unknown or repeated arguments; parameters not
// given are Undefined.
std::vector<Value> bind_args(std::string_view fn, const CallArgs& args,
                             std::initializer_list<std::string_view> names);

// Python's printf-style `format % args` (%s %d %i %f %r %%; widths and precisions).
std::string percent_format(const std::string& format, const Value& args);

// Unicode case mapping (Python's str.upper() and str.lower(): full mappings, so "ß" -> "SS").
std::string to_upper(const std::string& s);
std::string to_lower(const std::string& s);

// Python's str.strip/lstrip/rstrip: `chars` Undefined or None strips whitespace.
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);

}  // namespace tf::jinja
