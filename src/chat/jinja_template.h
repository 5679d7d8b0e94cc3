// A parsed Jinja template and its evaluator: the small Jinja2 interpreter behind chat
// templates (lexer -> parser -> syntax tree -> this tree-walking evaluator over Values).
//
// Scoping follows jinja2: `set` at the top level or inside if/with writes the enclosing
// scope; each for-loop iteration has a fresh scope, so a `set` inside a loop is gone after
// the iteration (templates carry state out of loops with namespace()); macros see the scope
// they were defined in plus their arguments.
#pragma once

#include <string>
#include <string_view>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace tf::jinja {

class Template {
 public:
  // Parses `source`; a syntax error throws tf::Error "chat template: line N: ...".
  explicit Template(std::string_view source);

  // Renders with `vars` as the template's variables, over the globals (range, namespace,
  // raise_exception, ...). Errors throw tf::Error naming the line; raise_exception's message
  // is thrown as it is. Thread-safe: rendering does not modify the template.
  std::string render(const Dict& vars) const;

 private:
  Body body_;
};

}  // namespace tf::jinja
