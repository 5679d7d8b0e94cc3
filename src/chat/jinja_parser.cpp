#include "chat/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "chat/jinja_builtins.h"
#include "chat/jinja_lexer.h"

namespace tf::jinja {

namespace {

// Templates come from model files: nesting deeper than any real template is refused rather
// than recursing (parsing, evaluating, freeing the tree) until the stack runs out.
constexpr int kMaxNesting = 200;      // statements inside statements
constexpr int kMaxExprHeight = 200;   // height of an expression's tree
constexpr int kMaxExprNesting = 600;  // parser recursion: parentheses, brackets, unary chains

// Sets e's height from its children; fails when the expression is nested too deeply.
ExprPtr sealed(ExprPtr e) {
  int h = 0;
  for (const ExprPtr& c : e->children)
    if (c) h = std::max(h, c->height);
  for (const Arg& a : e->args) h = std::max(h, a.value->height);
  e->height = h + 1;
  if (e->height > kMaxExprHeight)
    fail_at(e->line, fmt::format("expression nested more than {} levels deep", kMaxExprHeight));
  return e;
}

ExprPtr make_expr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

StmtPtr make_stmt(StmtKind kind, int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->line = line;
  return s;
}

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::Text: return "template text";
    case Tok::VarBegin: return "'{{'";
    case Tok::VarEnd: return "'}}'";
    case Tok::BlockBegin: return "'{%'";
    case Tok::BlockEnd: return "'%}'";
    case Tok::String: return "a string";
    case Tok::End: return "end of template";
    default: return "'" + t.text + "'";
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse_template() {
    std::string end;
    Body body = parse_body({}, "", end);
    return body;
  }

 private:
  // ---- token helpers
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t k = 1) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void unexpected(const std::string& expected) const {
    fail_at(cur().line, "expected " + expected + ", got " + describe(cur()));
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) unexpected(std::string("'") + op + "'");
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) unexpected("a name");
    return next().text;
  }
  void expect_block_end(const std::string& tag) {
    if (cur().type != Tok::BlockEnd)
      fail_at(cur().line, "expected the end of the '" + tag + "' tag ('%}'), got " + describe(cur()));
    next();
  }

  // ---- statements

  // Statements until a {% tag %} whose name is in `ends` (consumed up to the name, which is
  // stored in `which`), or the end of the template when `ends` is empty. `opener` names the
  // block being closed, for the error when the template ends first.
  Body parse_body(std::initializer_list<const char*> ends, const std::string& opener,
                  std::string& which) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::End) {
        if (ends.size() == 0) return body;
        std::string names;
        for (const char* e : ends) names += std::string(names.empty() ? "" : " or ") + "'" + e + "'";
        fail_at(t.line, "unexpected end of template: the '" + opener + "' block needs " + names);
      }
      if (t.type == Tok::Text) {
        auto s = make_stmt(StmtKind::Text, t.line);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::VarBegin) {
        next();
        auto s = make_stmt(StmtKind::Output, t.line);
        s->expr = parse_tuple(/*with_condexpr=*/true, {});
        if (cur().type != Tok::VarEnd) unexpected("'}}'");
        next();
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        const Token& name = peek();
        if (name.type == Tok::Name &&
            std::any_of(ends.begin(), ends.end(), [&](const char* e) { return name.text == e; })) {
          next();
          which = next().text;
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        unexpected("template text or a tag");
      }
    }
  }

  // Counts the parser's own recursion (into nested statements, or into parentheses, brackets
  // and chains of unary operators, which leave no height in the tree).
  struct NestingGuard {
    int& depth;
    NestingGuard(int& d, int limit, int line) : depth(d) {
      if (++depth > limit) fail_at(line, fmt::format("template nested more than {} levels deep", limit));
    }
    ~NestingGuard() { --depth; }
  };

  StmtPtr parse_statement() {
    const NestingGuard guard(nesting_, kMaxNesting, cur().line);
    const Token& t = cur();
    if (t.type != Tok::Name) unexpected("a tag name");
    const std::string tag = next().text;
    if (tag == "if") return parse_if(t.line);
    if (tag == "for") return parse_for(t.line);
    if (tag == "set") return parse_set(t.line);
    if (tag == "macro") return parse_macro(t.line);
    if (tag == "with") return parse_with(t.line);
    if (tag == "filter") return parse_filter_block(t.line);
    if (tag == "generation") {
      auto s = make_stmt(StmtKind::Generation, t.line);
      expect_block_end(tag);
      std::string end;
      s->body = parse_body({"endgeneration"}, tag, end);
      expect_block_end(end);
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_at(t.line, "'" + tag + "' outside of a for loop");
      auto s = make_stmt(tag == "break" ? StmtKind::Break : StmtKind::Continue, t.line);
      expect_block_end(tag);
      return s;
    }
    static const char* const kUnsupported[] = {"include", "import", "from", "extends", "block",
                                               "call", "do", "autoescape", "trans"};
    for (const char* u : kUnsupported)
      if (tag == u) fail_at(t.line, "the '" + tag + "' tag is not supported in chat templates");
    fail_at(t.line, "unknown tag '" + tag + "'");
  }

  StmtPtr parse_if(int line) {
    auto s = make_stmt(StmtKind::If, line);
    std::string tag = "if";
    while (true) {
      ExprPtr cond = parse_tuple(/*with_condexpr=*/false, {});
      expect_block_end(tag);
      std::string end;
      Body body = parse_body({"elif", "else", "endif"}, "if", end);
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") {
        tag = end;
        continue;
      }
      if (end == "else") {
        expect_block_end(end);
        s->else_body = parse_body({"endif"}, "if", end);
      }
      expect_block_end(end);
      return s;
    }
  }

  StmtPtr parse_for(int line) {
    auto s = make_stmt(StmtKind::For, line);
    s->targets = parse_target_names({"in"});
    if (!skip_name("in")) unexpected("'in'");
    s->expr = parse_tuple(/*with_condexpr=*/false, {"recursive"});
    if (skip_name("if")) s->condition = parse_expression(/*with_condexpr=*/true);
    if (is_name("recursive")) fail_at(cur().line, "recursive for loops are not supported");
    expect_block_end("for");
    std::string end;
    ++loop_depth_;
    const bool outer_names_loop = names_loop_;
    names_loop_ = false;
    s->body = parse_body({"else", "endfor"}, "for", end);
    s->body_names_loop = names_loop_;
    names_loop_ = outer_names_loop || names_loop_;
    --loop_depth_;
    if (end == "else") {
      expect_block_end(end);
      s->else_body = parse_body({"endfor"}, "for", end);
    }
    expect_block_end(end);
    return s;
  }

  // Assignment targets: `a` or `a, b` (for and set).
  std::vector<std::string> parse_target_names(std::initializer_list<const char*> end_names) {
    std::vector<std::string> names;
    const bool parens = skip_op("(");
    while (true) {
      if (cur().type != Tok::Name) unexpected("a variable name to assign to");
      names.push_back(next().text);
      if (!skip_op(",")) break;
      if (is_op(")") || cur().type == Tok::BlockEnd ||
          std::any_of(end_names.begin(), end_names.end(), [&](const char* e) { return is_name(e); }))
        break;
    }
    if (parens) expect_op(")");
    return names;
  }

  StmtPtr parse_set(int line) {
    // {% set ns.attr = ... %}
    if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == ".") {
      auto s = make_stmt(StmtKind::Set, line);
      s->targets = {next().text};
      next();
      s->attr = expect_name();
      expect_op("=");
      s->expr = parse_tuple(/*with_condexpr=*/true, {});
      expect_block_end("set");
      return s;
    }
    std::vector<std::string> targets = parse_target_names({});
    if (skip_op("=")) {
      auto s = make_stmt(StmtKind::Set, line);
      s->targets = std::move(targets);
      s->expr = parse_tuple(/*with_condexpr=*/true, {});
      expect_block_end("set");
      return s;
    }
    if (targets.size() != 1) fail_at(line, "a block set assigns one variable");
    auto s = make_stmt(StmtKind::SetBlock, line);
    s->targets = std::move(targets);
    if (skip_op("|")) s->filters = parse_filter_chain();
    expect_block_end("set");
    std::string end;
    s->body = parse_body({"endset"}, "set", end);
    expect_block_end(end);
    return s;
  }

  StmtPtr parse_macro(int line) {
    auto s = make_stmt(StmtKind::Macro, line);
    s->targets = {expect_name()};
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(/*with_condexpr=*/true);
      else if (!s->params.empty() && s->params.back().default_value)
        fail_at(cur().line, "macro parameter '" + p.name + "' without a default follows one with a default");
      s->params.push_back(std::move(p));
    }
    next();
    expect_block_end("macro");
    std::string end;
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;  // break/continue cannot reach a loop outside the macro
    s->body = parse_body({"endmacro"}, "macro", end);
    loop_depth_ = saved_depth;
    expect_block_end(end);
    return s;
  }

  StmtPtr parse_with(int line) {
    auto s = make_stmt(StmtKind::With, line);
    while (cur().type != Tok::BlockEnd) {
      if (!s->assigns.empty()) expect_op(",");
      std::string name = expect_name();
      expect_op("=");
      s->assigns.emplace_back(std::move(name), parse_expression(/*with_condexpr=*/true));
    }
    expect_block_end("with");
    std::string end;
    s->body = parse_body({"endwith"}, "with", end);
    expect_block_end(end);
    return s;
  }

  StmtPtr parse_filter_block(int line) {
    auto s = make_stmt(StmtKind::FilterBlock, line);
    s->filters = parse_filter_chain();
    expect_block_end("filter");
    std::string end;
    s->body = parse_body({"endfilter"}, "filter", end);
    expect_block_end(end);
    return s;
  }

  // `f(args) | g | h(args)` after a '|' or a {% filter %}: Filter nodes without a subject.
  std::vector<ExprPtr> parse_filter_chain() {
    std::vector<ExprPtr> chain;
    do {
      chain.push_back(parse_filter(nullptr));
    } while (skip_op("|"));
    return chain;
  }

  // ---- expressions

  // One expression, or a tuple of them separated by commas (`{{ a, b }}`, `for x in a, b`).
  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<const char*> end_names,
                      bool explicit_parens = false) {
    const int line = cur().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")") ||
          std::any_of(end_names.begin(), end_names.end(), [&](const char* e) { return is_name(e); }))
        break;
      items.push_back(parse_expression(with_condexpr));
      if (!is_op(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) unexpected("an expression");
    }
    auto e = make_expr(ExprKind::Tuple, line);
    e->children = std::move(items);
    return sealed(std::move(e));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    const NestingGuard guard(expr_nesting_, kMaxExprNesting, cur().line);
    const int line = cur().line;
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      auto e = make_expr(ExprKind::Cond, line);
      ExprPtr cond = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_condexpr() : nullptr;
      e->children.push_back(std::move(expr));
      e->children.push_back(std::move(cond));
      e->children.push_back(std::move(otherwise));
      expr = sealed(std::move(e));
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, const std::string& name, ExprPtr left, ExprPtr right, int line) {
    auto e = make_expr(kind, line);
    e->name = name;
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return sealed(std::move(e));
  }

  ExprPtr parse_or() {
    const int line = cur().line;
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary(ExprKind::Or, "or", std::move(left), parse_and(), line);
    return left;
  }

  ExprPtr parse_and() {
    const int line = cur().line;
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary(ExprKind::And, "and", std::move(left), parse_not(), line);
    return left;
  }

  ExprPtr parse_not() {
    const NestingGuard guard(expr_nesting_, kMaxExprNesting, cur().line);
    const int line = cur().line;
    if (skip_name("not")) {
      auto e = make_expr(ExprKind::Not, line);
      e->children.push_back(parse_not());
      return sealed(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    auto e = make_expr(ExprKind::Compare, line);
    while (true) {
      std::string op;
      if (cur().type == Tok::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                    cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = next().text;
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      e->ops.push_back(op);
      e->children.push_back(parse_math1());
    }
    if (e->ops.empty()) return first;
    e->children.insert(e->children.begin(), std::move(first));
    return sealed(std::move(e));
  }

  ExprPtr parse_math1() {
    const int line = cur().line;
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = next().text;
      left = binary(ExprKind::Binary, op, std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make_expr(ExprKind::Concat, line);
    e->children.push_back(std::move(first));
    while (skip_op("~")) e->children.push_back(parse_math2());
    return sealed(std::move(e));
  }

  ExprPtr parse_math2() {
    const int line = cur().line;
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = next().text;
      left = binary(ExprKind::Binary, op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    const int line = cur().line;
    ExprPtr left = parse_unary(/*with_filter=*/true);
    while (skip_op("**")) left = binary(ExprKind::Binary, "**", std::move(left), parse_unary(true), line);
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    const NestingGuard guard(expr_nesting_, kMaxExprNesting, cur().line);
    const int line = cur().line;
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make_expr(next().text == "-" ? ExprKind::Neg : ExprKind::Pos, line);
      node->children.push_back(parse_unary(/*with_filter=*/false));
      node = sealed(std::move(node));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    if (t.type == Tok::Name) {
      next();
      auto e = make_expr(ExprKind::Literal, t.line);
      if (t.text == "true" || t.text == "True") e->literal = Value(true);
      else if (t.text == "false" || t.text == "False") e->literal = Value(false);
      else if (t.text == "none" || t.text == "None") e->literal = Value(nullptr);
      else {
        e->kind = ExprKind::Name;
        e->name = t.text;
        if (e->name == "loop") names_loop_ = true;
      }
      return e;
    }
    if (t.type == Tok::String) {  // adjacent strings concatenate, as in Python
      auto e = make_expr(ExprKind::Literal, t.line);
      std::string s;
      while (cur().type == Tok::String) s += next().text;
      e->literal = Value(std::move(s));
      return e;
    }
    if (t.type == Tok::Int || t.type == Tok::Float) {
      next();
      auto e = make_expr(ExprKind::Literal, t.line);
      e->literal = t.type == Tok::Int ? Value(t.int_value) : Value(t.float_value);
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(/*with_condexpr=*/true, {}, /*explicit_parens=*/true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto e = make_expr(ExprKind::List, t.line);
      while (!is_op("]")) {
        if (!e->children.empty()) expect_op(",");
        if (is_op("]")) break;
        e->children.push_back(parse_expression(true));
      }
      next();
      return sealed(std::move(e));
    }
    if (is_op("{")) {
      next();
      auto e = make_expr(ExprKind::Dict, t.line);
      while (!is_op("}")) {
        if (!e->children.empty()) expect_op(",");
        if (is_op("}")) break;
        e->children.push_back(parse_expression(true));
        expect_op(":");
        e->children.push_back(parse_expression(true));
      }
      next();
      return sealed(std::move(e));
    }
    unexpected("an expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) node = parse_subscript(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (skip_op("|")) node = parse_filter(std::move(node));
      else if (is_name("is")) node = parse_test(std::move(node));
      else if (is_op("(")) node = parse_call(std::move(node));
      else return node;
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    if (t.text == ".") {
      const Token& attr = next();
      if (attr.type == Tok::Name) {
        auto e = make_expr(ExprKind::Attr, t.line);
        e->name = attr.text;
        e->children.push_back(std::move(node));
        return sealed(std::move(e));
      }
      if (attr.type != Tok::Int) fail_at(attr.line, "expected an attribute name or number after '.'");
      auto e = make_expr(ExprKind::Item, t.line);
      e->children.push_back(std::move(node));
      auto index = make_expr(ExprKind::Literal, attr.line);
      index->literal = Value(attr.int_value);
      e->children.push_back(std::move(index));
      return sealed(std::move(e));
    }
    // [index], [start:stop:step], or [a, b] (a tuple key)
    std::vector<ExprPtr> parts;
    ExprPtr result;
    while (!is_op("]")) {
      if (!parts.empty()) expect_op(",");
      parts.push_back(parse_subscribed());
    }
    next();
    if (parts.empty()) fail_at(t.line, "empty subscript '[]'");
    if (parts.size() == 1 && parts[0]->kind == ExprKind::Slice) {
      parts[0]->children[0] = std::move(node);
      return sealed(std::move(parts[0]));
    }
    // Python would make a tuple of slice objects ([1:2, 3]), which no list, string or dict
    // accepts as a key.
    for (const ExprPtr& p : parts)
      if (p->kind == ExprKind::Slice) fail_at(t.line, "a slice cannot be part of a tuple subscript");
    auto e = make_expr(ExprKind::Item, t.line);
    e->children.push_back(std::move(node));
    if (parts.size() == 1) {
      e->children.push_back(std::move(parts[0]));
    } else {
      auto tuple = make_expr(ExprKind::Tuple, t.line);
      tuple->children = std::move(parts);
      e->children.push_back(sealed(std::move(tuple)));
    }
    return sealed(std::move(e));
  }

  // One subscript part: an expression, or a slice (returned with a null children[0]).
  ExprPtr parse_subscribed() {
    const int line = cur().line;
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    next();  // ':'
    auto e = make_expr(ExprKind::Slice, line);
    e->children.push_back(nullptr);
    e->children.push_back(std::move(start));
    e->children.push_back(is_op("]") || is_op(",") || is_op(":") ? nullptr : parse_expression(true));
    if (skip_op(":"))
      e->children.push_back(is_op("]") || is_op(",") ? nullptr : parse_expression(true));
    else
      e->children.push_back(nullptr);
    return e;
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make_expr(ExprKind::Call, cur().line);
    e->children.push_back(std::move(node));
    e->args = parse_call_args();
    return sealed(std::move(e));
  }

  std::vector<Arg> parse_call_args() {
    expect_op("(");
    std::vector<Arg> args;
    bool seen_keyword = false;
    while (!is_op(")")) {
      if (!args.empty()) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail_at(cur().line, "*args and **kwargs in calls are not supported");
      Arg a;
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().text == "=") {
        a.name = next().text;
        next();
        seen_keyword = true;
      } else if (seen_keyword) {
        fail_at(cur().line, "positional argument follows keyword argument");
      }
      a.value = parse_expression(true);
      args.push_back(std::move(a));
    }
    next();
    return args;
  }

  ExprPtr parse_filter(ExprPtr node) {
    const int line = cur().line;
    std::string name = expect_name();
    if (!has_filter(name)) fail_at(line, "no filter named '" + name + "'");
    auto e = make_expr(ExprKind::Filter, line);
    e->name = std::move(name);
    e->children.push_back(std::move(node));
    if (is_op("(")) e->args = parse_call_args();
    return sealed(std::move(e));
  }

  ExprPtr parse_test(ExprPtr node) {
    const int line = next().line;  // 'is'
    const bool negated = skip_name("not");
    std::string name = expect_name();
    if (!has_test(name)) fail_at(line, "no test named '" + name + "'");
    auto e = make_expr(ExprKind::Test, line);
    e->name = std::move(name);
    e->children.push_back(std::move(node));
    if (is_op("(")) {
      e->args = parse_call_args();
    } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      // `x is divisibleby 3`, `x is sameas false`: one argument without parentheses.
      if (is_name("is")) fail_at(cur().line, "tests cannot be chained with 'is'");
      Arg a;
      a.value = parse_postfix(parse_primary());
      e->args.push_back(std::move(a));
    }
    if (!negated) return sealed(std::move(e));
    auto n = make_expr(ExprKind::Not, line);
    n->children.push_back(sealed(std::move(e)));
    return sealed(std::move(n));
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  bool names_loop_ = false;  // a Name `loop` was parsed since the innermost for body began
  int nesting_ = 0;
  int expr_nesting_ = 0;
};

}  // namespace

Body parse(std::string_view source) { return Parser(tokenize(source)).parse_template(); }

}  // namespace tf::jinja
