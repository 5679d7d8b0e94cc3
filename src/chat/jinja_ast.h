// The syntax tree of a parsed template: expressions and statements, each with the template
// line it came from (for error messages). One struct per family with a kind tag keeps the
// evaluator a pair of switches; each kind's comment says which fields it uses.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace tf::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// One argument of a call, filter or test: positional when name is empty.
struct Arg {
  std::string name;
  ExprPtr value;
};

enum class ExprKind {
  Literal,  // literal
  Name,     // name
  List,     // children: the items
  Tuple,    // children: the items
  Dict,     // children: key, value, key, value, ...
  Attr,     // children[0] . name
  Item,     // children[0] [ children[1] ]
  Slice,    // children[0] [ children[1] : children[2] : children[3] ] (missing parts null)
  Call,     // children[0] ( args )
  Filter,   // children[0] | name ( args ); children[0] is null in a {% filter %} chain
  Test,     // children[0] is name ( args )
  Neg,      // - children[0]
  Pos,      // + children[0]
  Not,      // not children[0]
  Binary,   // children[0] name children[1], name one of + - * / // % **
  Compare,  // children[0] ops[0] children[1] ops[1] children[2] ...: == != < <= > >= in notin
  And,      // children[0] and children[1]
  Or,       // children[0] or children[1]
  Concat,   // children joined with ~
  Cond,     // children[0] if children[1] else children[2] (children[2] null without else)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int height = 1;  // of this subtree; the parser bounds it, so evaluating never runs out of stack
  Value literal;
  std::string name;
  std::vector<ExprPtr> children;
  std::vector<std::string> ops;
  std::vector<Arg> args;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null when required
};

enum class StmtKind {
  Text,         // text
  Output,       // {{ expr }}
  If,           // branches: (condition, body)...; else_body
  For,          // for targets in expr [if condition] body [else else_body]
  Set,          // set targets = expr; or set targets[0].attr = expr (namespace attribute)
  SetBlock,     // set targets[0] [| filters] body endset
  Macro,        // macro targets[0](params) body endmacro
  Break,
  Continue,
  With,         // with assigns body endwith
  FilterBlock,  // filter filters body endfilter
  Generation,   // generation body endgeneration (Hugging Face's assistant-mask marker)
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::string attr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<MacroParam> params;
  std::vector<ExprPtr> filters;  // Filter expressions whose children[0] is null
  std::vector<std::pair<std::string, ExprPtr>> assigns;
  // For: whether the body names `loop` (scoping is lexical, so no other code can see it);
  // the loop object is built for each iteration only then.
  bool body_names_loop = true;
};

}  // namespace tf::jinja
