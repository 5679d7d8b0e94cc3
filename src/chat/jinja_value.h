// The values a Jinja template computes with, and the Python semantics jinja2 gives them.
//
// jinja2 compiles templates to Python, so what a chat template renders depends on Python's
// rules: str(True) is "True", 1 == 1.0, [] is falsy, 'a' < 'b', str of a list is its repr.
// This file is the one place those rules live: the kinds of value, truthiness, equality,
// ordering, str() and repr(). Lists and dicts are shared by reference, as Python's are
// (a namespace assigned to two names is one object).
//
// Strings are UTF-8 bytes; where Python counts characters (length, indexing, slicing) the
// helpers here count code points.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace tf::jinja {

class Value;

// A failure inside a filter, test, method or operator. The evaluator turns it into a tf::Error
// that names the template line of the expression at fault.
struct Failure {
  std::string message;
};

template <typename... Args>
[[noreturn]] void fail_eval(fmt::format_string<Args...> f, Args&&... args) {
  throw Failure{fmt::format(f, std::forward<Args>(args)...)};
}

// jinja2's default Undefined: what a missing variable, key or attribute evaluates to. It is
// falsy, renders as "", iterates as empty; using it any other way fails with `hint`
// ("'x' is undefined", "'dict object' has no attribute 'y'").
struct Undefined {
  std::string hint;
};

// How deeply lists and dicts may nest where a value is walked recursively (==, ordering,
// repr, tojson): far deeper than any message or tool schema (request JSON stops at 128
// levels), shallow enough for the stack. A template can build deeper values ({% set ns.x =
// [ns.x] %} in a loop); those fail when walked, and are freed without recursion.
constexpr int kMaxValueDepth = 512;

// The longest string a template may build, its rendered output included: far more text than
// any model's context holds, little enough that "-" * 10**12, or doubling a string in a loop,
// fails at once instead of exhausting memory. Every string Value is checked on construction;
// builders that grow a string piece by piece check as they go (append_bounded), so no
// allocation ever exceeds a small multiple of this.
constexpr size_t kMaxStringBytes = size_t(64) << 20;
// Fails unless `n` bytes are within kMaxStringBytes.
void check_string_size(size_t n);
// Python's int(x) for a float: truncated toward zero. Python integers are unbounded; these are
// 64-bit, so NaN, infinities and values beyond int64 fail naming `what`.
int64_t float_to_int(double x, std::string_view what);

// The work a render may do, in steps: each statement and expression evaluated, each loop
// iteration, each item a filter or operator walks or copies or range() builds. A render may
// take kRenderSteps plus kRenderStepsPerItem for each item of the lists it is given (the
// messages, the tools), so the bound grows with the conversation. Real templates take tens of
// steps per message (Qwen3's about 76); the base is a fraction of a second of CPU in a Release
// build, so a template cannot hold a request thread for long (jinja2 itself has no such bound).
constexpr int64_t kRenderSteps = 1'000'000;
constexpr int64_t kRenderStepsPerItem = 1'000;
// Charges `n` steps to the render running on this thread (a Failure past its limit);
// nothing when no render is running. StepBudget marks a render.
void spend_steps(int64_t n);
class StepBudget {
 public:
  explicit StepBudget(int64_t limit) : limit_(limit), outer_(current_) { current_ = this; }
  ~StepBudget() { current_ = outer_; }
  StepBudget(const StepBudget&) = delete;
  StepBudget& operator=(const StepBudget&) = delete;

 private:
  friend void spend_steps(int64_t n);
  static thread_local StepBudget* current_;
  int64_t spent_ = 0;
  int64_t limit_;
  StepBudget* outer_;  // the budget this one hides while it lives (none in practice)
};
// out += piece, failing first if the result would pass kMaxStringBytes.
void append_bounded(std::string& out, std::string_view piece);

struct List {
  std::vector<Value> items;
  bool is_tuple = false;  // only changes repr: (1, 2) instead of [1, 2]
  ~List();                // frees nested lists and dicts iteratively (see release_nested)
};

// An insertion-ordered string-keyed map. Kind says what Python object it stands for:
// a dict, a jinja2 namespace() (attributes settable with {% set ns.x = ... %}) or a plain
// object whose keys are attributes (the `loop` variable).
struct Dict {
  enum class Kind { Dict, Namespace, Object };
  Kind kind = Kind::Dict;
  std::vector<std::pair<std::string, Value>> items;

  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
  ~Dict();  // as ~List
};

// Arguments of a call: f(1, 2, key=3).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Anything callable: a global (range, namespace), a bound method ('a'.upper), a macro.
struct Function {
  std::string name;
  std::function<Value(CallArgs&)> call;
};

enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

// What the as_*() accessors do with a value of another kind: a Failure ("'float' object cannot
// be interpreted as an integer"), as Python raises TypeError, never std::bad_variant_access.
[[noreturn]] void fail_kind(const Value& v, std::string_view expected);

class Value {
 public:
  Value() : v_(Undefined{}) {}
  Value(std::nullptr_t) : v_(nullptr) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(int64_t(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(size_t i) : v_(int64_t(i)) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_((check_string_size(s.size()), std::move(s))) {}
  Value(std::string_view s) : v_((check_string_size(s.size()), std::string(s))) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::shared_ptr<List> l) : v_(std::move(l)) {}
  Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}
  Value(std::shared_ptr<Function> f) : v_(std::move(f)) {}

  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  static Value list(std::vector<Value> items = {}, bool is_tuple = false);
  static Value dict(Dict::Kind kind = Dict::Kind::Dict);
  static Value function(std::string name, std::function<Value(CallArgs&)> call);

  Kind kind() const { return Kind(v_.index()); }
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_float() const { return kind() == Kind::Float; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python: bool is an int
  bool is_string() const { return kind() == Kind::String; }
  bool is_list() const { return kind() == Kind::List; }
  bool is_dict() const { return kind() == Kind::Dict; }
  bool is_function() const { return kind() == Kind::Function; }
  // A Python dict proper (not a namespace or the loop object).
  bool is_mapping() const { return is_dict() && as_dict().kind == Dict::Kind::Dict; }

  // Each fails (fail_kind) on a value of another kind.
  bool as_bool() const { return get<bool>("a bool"); }
  int64_t as_int() const;    // bool or int
  double as_double() const;  // bool, int or float
  const std::string& as_string() const { return get<std::string>("a string"); }
  List& as_list() const { return *get<std::shared_ptr<List>>("a list"); }
  Dict& as_dict() const { return *get<std::shared_ptr<Dict>>("a dict"); }
  Function& as_function() const { return *get<std::shared_ptr<Function>>("a function"); }
  const std::string& undefined_hint() const { return get<Undefined>("undefined").hint; }
  // The same object (Python `is`), for lists, dicts and functions; equal scalars otherwise.
  bool same_object(const Value& other) const;
  // A list or dict that no other Value shares (freeing this Value frees it).
  bool is_sole_container() const;

 private:
  explicit Value(Undefined u) : v_(std::move(u)) {}
  template <typename T>
  const T& get(std::string_view expected) const {
    if (const T* p = std::get_if<T>(&v_)) return *p;
    fail_kind(*this, expected);
  }
  std::variant<Undefined, std::nullptr_t, bool, int64_t, double, std::string,
               std::shared_ptr<List>, std::shared_ptr<Dict>, std::shared_ptr<Function>>
      v_;
};

// Python's type name, for error messages: "str", "int", "dict", "NoneType".
std::string type_name(const Value& v);

bool truthy(const Value& v);                      // bool(v)
bool equals(const Value& a, const Value& b);      // a == b
int compare(const Value& a, const Value& b);      // <0, 0, >0; fails where Python raises TypeError
std::string to_str(const Value& v);               // str(v); "" for undefined
std::string to_repr(const Value& v);              // repr(v)
std::string float_repr(double d);                 // repr(d): "1.0", "0.1", "1e+20", "nan"

// Fails with the undefined value's hint; for operations Undefined does not allow.
[[noreturn]] void fail_undefined(const Value& v);

// The items a for loop or list() sees: a list's items, a dict's keys, a string's characters;
// nothing for undefined. Fails for values Python cannot iterate.
std::vector<Value> iterate(const Value& v);

// UTF-8 as code points, and back.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
size_t utf8_length(std::string_view s);

// Python's str.isspace() for one code point (Unicode White_Space plus the separators
// \x1c-\x1f), which str.strip() and str.split() use.
bool is_py_space(char32_t c);

}  // namespace tf::jinja
