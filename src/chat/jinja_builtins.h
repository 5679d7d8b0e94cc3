// The filters, tests and global functions a template can use: jinja2's built-in ones that
// chat templates need, with Hugging Face's tojson (json.dumps, not jinja2's HTML-safe one),
// and HF's globals raise_exception and strftime_now.
#pragma once

#include <string_view>
#include <vector>

#include "chat/jinja_value.h"

namespace tf::jinja {

using FilterFn = Value (*)(const Value& subject, const CallArgs& args);
using TestFn = bool (*)(const Value& subject, const CallArgs& args);

FilterFn find_filter(std::string_view name);  // nullptr when unknown
TestFn find_test(std::string_view name);      // nullptr when unknown
inline bool has_filter(std::string_view name) { return find_filter(name) != nullptr; }
inline bool has_test(std::string_view name) { return find_test(name) != nullptr; }

// range, dict, namespace, raise_exception (throws tf::Error with the template's message as
// it is) and strftime_now (local time, as datetime.now().strftime). namespace() appends each
// namespace it makes to `namespaces`, for the render to empty when it ends: namespaces are the
// only objects a template can change, so a reference cycle ({% set ns.me = ns %}) runs through
// one, and emptying them frees it.
void add_globals(Dict& scope, std::vector<Value>& namespaces);

}  // namespace tf::jinja
