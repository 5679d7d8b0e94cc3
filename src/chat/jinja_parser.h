// Jinja parser: tokens -> syntax tree, following jinja2's grammar and operator precedence
// (loosest first): `x if c else y`, or, and, not, comparisons and `in`, + -, ~, * / // %, **,
// unary - +, then postfix . [] () and the filter-level | and `is` (so `a + b|f` is a + (b|f)).
//
// Statements: if/elif/else, for (with `if` filter and else), set (plain, tuple, namespace
// attribute, block), macro, break/continue, with, filter, generation, raw. Anything else
// (include, extends, call, ...) is a syntax error naming the tag and its line, as are
// unknown filters and tests.
#pragma once

#include <string_view>

#include "chat/jinja_ast.h"

namespace tf::jinja {

// Throws tf::Error "chat template: line N: ..." on a syntax error.
Body parse(std::string_view source);

}  // namespace tf::jinja
