#include "chat/jinja_template.h"

#include <cstdint>
#include <memory>

#include "chat/jinja_builtins.h"
#include "chat/jinja_lexer.h"
#include "chat/jinja_ops.h"
#include "chat/jinja_parser.h"
#include "core/error.h"

namespace tf::jinja {

namespace {

// Variables of one scope; lookups walk to the parent. Shared pointers because a macro keeps
// (weakly) the scope it was defined in.
struct Scope {
  Dict vars;
  std::shared_ptr<Scope> parent;
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr child_scope(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

// How a statement list finished: normally, or by {% break %} / {% continue %}.
enum class Flow { Normal, Break, Continue };

// A runaway template (macro recursion) fails with a message instead of exhausting the stack:
// macro calls, and all nested statements and expressions together, are bounded, and so are
// the stack bytes they use: a frame's size depends on the build (sanitizers make frames
// several times larger), and a render may run on a server thread (8 MiB stacks).
constexpr int kMaxCallDepth = 100;
constexpr int kMaxEvalDepth = 3000;
constexpr uintptr_t kMaxStackBytes = uintptr_t(2) << 20;

class Renderer {
 public:
  Renderer() : stack_base_(uintptr_t(__builtin_frame_address(0))) {}

  Flow exec(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const StmtPtr& s : body) {
      const Flow f = exec(*s, scope, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

 private:
  // Counts nested exec/eval calls (see kMaxEvalDepth) and checks the stack they use (the
  // stack grows down from stack_base_).
  struct DepthGuard {
    int& depth;
    DepthGuard(Renderer& r, int line) : depth(r.eval_depth_) {
      r.step(line);
      if (depth + 1 > kMaxEvalDepth || r.stack_base_ - uintptr_t(__builtin_frame_address(0)) > kMaxStackBytes)
        fail_at(line, fmt::format("template evaluation nested more than {} levels deep (or {} KiB of stack)",
                                  kMaxEvalDepth, kMaxStackBytes >> 10));
      ++depth;
    }
    ~DepthGuard() { --depth; }
  };

  // Runs one statement; a Failure in the statement itself (not in an expression, which eval
  // reports) becomes a tf::Error naming its line.
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
    const DepthGuard guard(*this, s.line);
    try {
      return exec_inner(s, scope, out);
    } catch (const Failure& f) {
      fail_at(s.line, f.message);
    }
  }

  Flow exec_inner(const Stmt& s, const ScopePtr& scope, std::string& out) {
    switch (s.kind) {
      case StmtKind::Text: append_bounded(out, s.text); return Flow::Normal;
      case StmtKind::Output: append_bounded(out, to_str(eval(*s.expr, scope))); return Flow::Normal;
      case StmtKind::If:
        for (const auto& [cond, body] : s.branches)
          if (truthy(eval(*cond, scope))) return exec(body, scope, out);
        return exec(s.else_body, scope, out);
      case StmtKind::For: exec_for(s, scope, out); return Flow::Normal;
      case StmtKind::Set: assign(s, eval(*s.expr, scope), scope); return Flow::Normal;
      case StmtKind::SetBlock: {
        std::string text;
        exec(s.body, scope, text);
        assign(s, apply_filters(s.filters, Value(std::move(text)), scope), scope);
        return Flow::Normal;
      }
      case StmtKind::Macro: define_macro(s, scope); return Flow::Normal;
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
      case StmtKind::With: {
        const ScopePtr inner = child_scope(scope);
        for (const auto& [name, expr] : s.assigns) inner->vars.set(name, eval(*expr, scope));
        return exec(s.body, inner, out);
      }
      case StmtKind::FilterBlock: {
        std::string text;
        const Flow f = exec(s.body, scope, text);
        append_bounded(out, to_str(apply_filters(s.filters, Value(std::move(text)), scope)));
        return f;
      }
      case StmtKind::Generation: return exec(s.body, scope, out);
    }
    return Flow::Normal;
  }

  // {% for targets in iterable if condition %}: the condition filters before the loop runs,
  // so loop.length and loop.last count only the items kept.
  void exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
    const Value iterable = eval(*s.expr, scope);
    std::vector<Value> items;
    try {
      items = iterate(iterable);
    } catch (const Failure& f) {
      fail_at(s.expr->line, f.message);
    }
    if (s.condition) {
      std::vector<Value> kept;
      for (Value& item : items) {
        const ScopePtr probe = child_scope(scope);
        bind_targets(s, item, *probe);
        if (truthy(eval(*s.condition, probe))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(s.else_body, child_scope(scope), out);
      return;
    }
    const int64_t n = int64_t(items.size());
    for (int64_t i = 0; i < n; ++i) {
      step(s.line);
      const ScopePtr iter = child_scope(scope);
      bind_targets(s, items[size_t(i)], *iter);
      if (s.body_names_loop) iter->vars.set("loop", loop_object(items, i));
      if (exec(s.body, iter, out) == Flow::Break) break;
    }
  }

  static Value loop_object(const std::vector<Value>& items, int64_t i) {
    const int64_t n = int64_t(items.size());
    Value loop = Value::dict(Dict::Kind::Object);
    Dict& d = loop.as_dict();
    d.items = {{"index", Value(i + 1)},
               {"index0", Value(i)},
               {"revindex", Value(n - i)},
               {"revindex0", Value(n - i - 1)},
               {"first", Value(i == 0)},
               {"last", Value(i == n - 1)},
               {"length", Value(n)},
               {"depth", Value(int64_t(1))},
               {"depth0", Value(int64_t(0))},
               {"previtem", i > 0 ? items[size_t(i - 1)] : Value::undefined("there is no previous item")},
               {"nextitem", i + 1 < n ? items[size_t(i + 1)] : Value::undefined("there is no next item")}};
    d.items.emplace_back("cycle", Value::function("loop.cycle", [i](CallArgs& a) {
                           if (a.positional.empty()) fail_eval("loop.cycle() needs at least one argument");
                           return a.positional[size_t(i) % a.positional.size()];
                         }));
    spend_steps(int64_t(d.items.size()));  // one step per attribute built
    return loop;
  }

  static void bind_targets(const Stmt& s, const Value& item, Scope& scope) {
    if (s.targets.size() == 1) {
      scope.vars.set(s.targets[0], item);
      return;
    }
    std::vector<Value> parts;
    try {
      parts = iterate(item);
    } catch (const Failure& f) {
      fail_at(s.line, "cannot unpack: " + f.message);
    }
    if (parts.size() != s.targets.size())
      fail_at(s.line, fmt::format("cannot unpack {} values into {} variables", parts.size(), s.targets.size()));
    for (size_t k = 0; k < parts.size(); ++k) scope.vars.set(s.targets[k], parts[k]);
  }

  // {% set x = v %}, {% set a, b = v %}, {% set ns.attr = v %}.
  void assign(const Stmt& s, const Value& value, const ScopePtr& scope) {
    if (!s.attr.empty()) {
      const Value ns = lookup(s.targets[0], scope);
      if (!ns.is_dict() || ns.as_dict().kind != Dict::Kind::Namespace)
        fail_at(s.line, "cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
      ns.as_dict().set(s.attr, value);
      return;
    }
    bind_targets(s, value, *scope);
  }

  void define_macro(const Stmt& s, const ScopePtr& scope) {
    const std::weak_ptr<Scope> defined_in = scope;
    const Stmt* macro = &s;
    scope->vars.set(s.targets[0], Value::function(s.targets[0], [this, macro, defined_in](CallArgs& a) {
                      return call_macro(*macro, defined_in.lock(), a);
                    }));
  }

  Value call_macro(const Stmt& m, const ScopePtr& defined_in, CallArgs& a) {
    const std::string& name = m.targets[0];
    if (!defined_in) fail_eval("macro '{}' called after the scope defining it ended", name);
    if (a.positional.size() > m.params.size())
      fail_eval("macro '{}' takes not more than {} argument(s)", name, m.params.size());
    const ScopePtr scope = child_scope(defined_in);
    std::vector<bool> given(m.params.size(), false);
    for (size_t i = 0; i < a.positional.size(); ++i) {
      scope->vars.set(m.params[i].name, a.positional[i]);
      given[i] = true;
    }
    for (auto& [key, value] : a.keyword) {
      size_t i = 0;
      while (i < m.params.size() && m.params[i].name != key) ++i;
      if (i == m.params.size()) fail_eval("macro '{}' has no parameter named '{}'", name, key);
      if (given[i]) fail_eval("macro '{}' got multiple values for argument '{}'", name, key);
      scope->vars.set(key, value);
      given[i] = true;
    }
    for (size_t i = 0; i < m.params.size(); ++i) {
      if (given[i]) continue;
      scope->vars.set(m.params[i].name, m.params[i].default_value
                                            ? eval(*m.params[i].default_value, scope)
                                            : Value::undefined(fmt::format("'{}' is undefined", m.params[i].name)));
    }
    if (depth_ >= kMaxCallDepth) fail_eval("macro '{}': calls nested deeper than {}", name, kMaxCallDepth);
    ++depth_;
    std::string out;
    try {
      exec(m.body, scope, out);
    } catch (...) {
      --depth_;
      throw;
    }
    --depth_;
    return Value(std::move(out));
  }

  static Value lookup(const std::string& name, const ScopePtr& scope) {
    for (const Scope* s = scope.get(); s; s = s->parent.get())
      if (const Value* v = s->vars.find(name)) return *v;
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

  CallArgs eval_args(const std::vector<Arg>& args, const ScopePtr& scope) {
    CallArgs out;
    for (const Arg& a : args) {
      if (a.name.empty()) out.positional.push_back(eval(*a.value, scope));
      else out.keyword.emplace_back(a.name, eval(*a.value, scope));
    }
    return out;
  }

  Value apply_filter(const Expr& f, const Value& subject, const ScopePtr& scope) {
    const CallArgs args = eval_args(f.args, scope);
    try {
      return find_filter(f.name)(subject, args);
    } catch (const Failure& e) {
      fail_at(f.line, "filter '" + f.name + "': " + e.message);
    }
  }

  Value apply_filters(const std::vector<ExprPtr>& filters, Value v, const ScopePtr& scope) {
    for (const ExprPtr& f : filters) v = apply_filter(*f, v, scope);
    return v;
  }

  // Evaluates an expression; a Failure inside becomes a tf::Error naming this line (the
  // innermost expression that failed, so the line is the most precise one).
  Value eval(const Expr& e, const ScopePtr& scope) {
    const DepthGuard guard(*this, e.line);
    try {
      return eval_inner(e, scope);
    } catch (const Failure& f) {
      fail_at(e.line, f.message);
    }
  }

  Value eval_inner(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case ExprKind::Literal: return e.literal;
      case ExprKind::Name: return lookup(e.name, scope);
      case ExprKind::List:
      case ExprKind::Tuple: {
        std::vector<Value> items;
        for (const ExprPtr& c : e.children) items.push_back(eval(*c, scope));
        return Value::list(std::move(items), e.kind == ExprKind::Tuple);
      }
      case ExprKind::Dict: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          const Value key = eval(*e.children[i], scope);
          if (!key.is_string()) fail_eval("dict keys must be strings here, got {}", type_name(key));
          d.as_dict().set(key.as_string(), eval(*e.children[i + 1], scope));
        }
        return d;
      }
      case ExprKind::Attr: return get_attr(eval(*e.children[0], scope), e.name);
      case ExprKind::Item: return get_item(eval(*e.children[0], scope), eval(*e.children[1], scope));
      case ExprKind::Slice: {
        const Value obj = eval(*e.children[0], scope);
        Value part[3];
        for (int k = 0; k < 3; ++k)
          if (e.children[size_t(k) + 1]) part[k] = eval(*e.children[size_t(k) + 1], scope);
        return slice(obj, part[0], part[1], part[2]);
      }
      case ExprKind::Call: {
        const Value callee = eval(*e.children[0], scope);
        CallArgs args = eval_args(e.args, scope);
        if (callee.is_undefined()) fail_undefined(callee);
        if (!callee.is_function()) fail_eval("'{}' object is not callable", type_name(callee));
        return callee.as_function().call(args);
      }
      case ExprKind::Filter: return apply_filter(e, eval(*e.children[0], scope), scope);
      case ExprKind::Test: {
        const Value subject = eval(*e.children[0], scope);
        const CallArgs args = eval_args(e.args, scope);
        return Value(find_test(e.name)(subject, args));
      }
      case ExprKind::Neg: return negate(eval(*e.children[0], scope));
      case ExprKind::Pos: return unary_plus(eval(*e.children[0], scope));
      case ExprKind::Not: return Value(!truthy(eval(*e.children[0], scope)));
      case ExprKind::Binary: return binary_op(e.name, eval(*e.children[0], scope), eval(*e.children[1], scope));
      case ExprKind::And: {  // Python returns the deciding operand, not a bool
        Value left = eval(*e.children[0], scope);
        return truthy(left) ? eval(*e.children[1], scope) : left;
      }
      case ExprKind::Or: {
        Value left = eval(*e.children[0], scope);
        return truthy(left) ? left : eval(*e.children[1], scope);
      }
      case ExprKind::Compare: {  // chained like Python: a < b < c is a < b and b < c
        Value left = eval(*e.children[0], scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.children[i + 1], scope);
          if (!compare_op(e.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case ExprKind::Concat: {
        std::string s;
        for (const ExprPtr& c : e.children) append_bounded(s, to_str(eval(*c, scope)));
        return Value(std::move(s));
      }
      case ExprKind::Cond:
        if (truthy(eval(*e.children[1], scope))) return eval(*e.children[0], scope);
        if (e.children[2]) return eval(*e.children[2], scope);
        return Value::undefined(fmt::format(
            "the inline if-expression on line {} evaluated to false and no else section was defined", e.line));
    }
    return Value();
  }

  static bool compare_op(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return equals(a, b);
    if (op == "!=") return !equals(a, b);
    if (op == "in") return contains(b, a);
    if (op == "notin") return !contains(b, a);
    const int c = compare(a, b);
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  // One step of the render's budget (StepBudget).
  static void step(int line) {
    try {
      spend_steps(1);
    } catch (const Failure& f) {
      fail_at(line, f.message);
    }
  }

  int depth_ = 0;       // macro calls in progress
  int eval_depth_ = 0;  // exec/eval calls in progress
  uintptr_t stack_base_;  // the frame address render() started from
};

}  // namespace

Template::Template(std::string_view source) : body_(parse(source)) {}

std::string Template::render(const Dict& vars) const {
  // Emptied when the render ends, however it ends (see add_globals).
  struct Namespaces {
    std::vector<Value> made;
    ~Namespaces() {
      for (Value& ns : made) ns.as_dict().items.clear();
    }
  } namespaces;
  auto globals = std::make_shared<Scope>();
  add_globals(globals->vars, namespaces.made);
  const ScopePtr top = child_scope(globals);
  top->vars.items = vars.items;
  std::string out;
  int64_t items = 0;
  for (const auto& kv : vars.items)
    if (kv.second.is_list()) items += int64_t(kv.second.as_list().items.size());
  const StepBudget budget(kRenderSteps + kRenderStepsPerItem * items);
  Renderer().exec(body_, top, out);
  return out;
}

}  // namespace tf::jinja
