#include "chat/jinja_value.h"

#include <charconv>
#include <cmath>

namespace tf::jinja {

namespace {

// Frees the lists and dicts in `pending` (each held by nothing else) without recursion: each
// one's own solely held lists and dicts move to `pending` before it is emptied, so every
// destructor that runs sees only scalars and shared containers. Plain destructors would
// recurse once per level, and a template can nest a list 10^5 deep.
void release_nested(std::vector<Value>& pending) {
  while (!pending.empty()) {
    Value v = std::move(pending.back());
    pending.pop_back();
    auto take = [&](Value& child) {
      if (child.is_sole_container()) pending.push_back(std::move(child));
    };
    if (v.is_list()) {
      for (Value& c : v.as_list().items) take(c);
      v.as_list().items.clear();
    } else {
      for (auto& kv : v.as_dict().items) take(kv.second);
      v.as_dict().items.clear();
    }
  }
}

}  // namespace

List::~List() {
  std::vector<Value> pending;
  for (Value& c : items)
    if (c.is_sole_container()) pending.push_back(std::move(c));
  release_nested(pending);
}

Dict::~Dict() {
  std::vector<Value> pending;
  for (auto& kv : items)
    if (kv.second.is_sole_container()) pending.push_back(std::move(kv.second));
  release_nested(pending);
}

bool Value::is_sole_container() const {
  if (const auto* l = std::get_if<std::shared_ptr<List>>(&v_)) return l->use_count() == 1;
  if (const auto* d = std::get_if<std::shared_ptr<Dict>>(&v_)) return d->use_count() == 1;
  return false;
}

thread_local StepBudget* StepBudget::current_ = nullptr;

void spend_steps(int64_t n) {
  StepBudget* b = StepBudget::current_;
  if (!b) return;
  b->spent_ += n;
  if (b->spent_ > b->limit_)
    fail_eval("template evaluation took more than {} steps ({} and {} per item of the lists it was given)", b->limit_,
              kRenderSteps, kRenderStepsPerItem);
}

void check_string_size(size_t n) {
  if (n > kMaxStringBytes) fail_eval("string of {} bytes is longer than the {} MiB limit", n, kMaxStringBytes >> 20);
}

int64_t float_to_int(double x, std::string_view what) {
  // 2^63 is exact as a double; every double below it truncates into range.
  if (!(std::fabs(x) < 9223372036854775808.0)) fail_eval("{}: {} does not fit in a 64-bit integer", what, x);
  return int64_t(x);
}

void append_bounded(std::string& out, std::string_view piece) {
  check_string_size(out.size() + piece.size());
  out += piece;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->is_tuple = is_tuple;
  return Value(std::move(l));
}

Value Value::dict(Dict::Kind kind) {
  auto d = std::make_shared<Dict>();
  d->kind = kind;
  return Value(std::move(d));
}

Value Value::function(std::string name, std::function<Value(CallArgs&)> call) {
  auto f = std::make_shared<Function>();
  f->name = std::move(name);
  f->call = std::move(call);
  return Value(std::move(f));
}

void fail_kind(const Value& v, std::string_view expected) {
  if (v.is_undefined()) fail_undefined(v);
  fail_eval("'{}' object cannot be interpreted as {}", type_name(v), expected);
}

int64_t Value::as_int() const { return is_bool() ? int64_t(as_bool()) : get<int64_t>("an integer"); }

double Value::as_double() const { return is_float() ? std::get<double>(v_) : double(as_int()); }

bool Value::same_object(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::List: return &as_list() == &other.as_list();
    case Kind::Dict: return &as_dict() == &other.as_dict();
    case Kind::Function: return &as_function() == &other.as_function();
    default: return equals(*this, other);
  }
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return "Undefined";
    case Kind::None: return "NoneType";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::String: return "str";
    case Kind::List: return v.as_list().is_tuple ? "tuple" : "list";
    case Kind::Dict:
      switch (v.as_dict().kind) {
        case Dict::Kind::Dict: return "dict";
        case Dict::Kind::Namespace: return "Namespace";
        case Dict::Kind::Object: return "LoopContext";
      }
      return "dict";
    case Kind::Function: return "function";
  }
  return "?";
}

void fail_undefined(const Value& v) { fail_eval("{}", v.undefined_hint()); }

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
    case Kind::None: return false;
    case Kind::Bool: return v.as_bool();
    case Kind::Int: return v.as_int() != 0;
    case Kind::Float: return v.as_double() != 0.0;
    case Kind::String: return !v.as_string().empty();
    case Kind::List: return !v.as_list().items.empty();
    case Kind::Dict: return v.as_dict().kind != Dict::Kind::Dict || !v.as_dict().items.empty();
    case Kind::Function: return true;
  }
  return false;
}

namespace {

void check_depth(int depth) {
  if (depth > kMaxValueDepth) fail_eval("value nested more than {} levels deep", kMaxValueDepth);
}

bool equals_at(const Value& a, const Value& b, int depth);
int compare_at(const Value& a, const Value& b, int depth);

}  // namespace

bool equals(const Value& a, const Value& b) { return equals_at(a, b, 0); }
int compare(const Value& a, const Value& b) { return compare_at(a, b, 0); }

namespace {

bool equals_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None: return true;
    case Kind::String: return a.as_string() == b.as_string();
    case Kind::List: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals_at(x.items[i], y.items[i], depth + 1)) return false;
      return true;
    }
    case Kind::Dict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.kind != Dict::Kind::Dict || y.kind != Dict::Kind::Dict) return &x == &y;
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.find(k);
        if (!w || !equals_at(v, *w, depth + 1)) return false;
      }
      return true;
    }
    default: return a.same_object(b);
  }
}

int compare_at(const Value& a, const Value& b, int depth) {
  check_depth(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // Byte order of UTF-8 is code point order, which is how Python orders str.
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals_at(x[i], y[i], depth + 1)) continue;
      return compare_at(x[i], y[i], depth + 1);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  fail_eval("ordering not supported between instances of '{}' and '{}'", type_name(a),
            type_name(b));
}

}  // namespace

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // The shortest digits that round-trip (what Python's repr picks), laid out by Python's
  // rule: positional for exponents -4..15, scientific with a two-digit exponent otherwise.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string s(buf, res.ptr);
  std::string out;
  if (s[0] == '-') {
    out = "-";
    s.erase(0, 1);
  }
  const size_t e = s.find('e');
  const int exp = std::stoi(s.substr(e + 1));
  std::string digits = s.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (digits.size() < size_t(exp) + 1) digits.append(size_t(exp) + 1 - digits.size(), '0');
      std::string frac = digits.substr(size_t(exp) + 1);
      out += digits.substr(0, size_t(exp) + 1) + "." + (frac.empty() ? "0" : frac);
    } else {
      out += "0." + std::string(size_t(-exp - 1), '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  return out;
}

namespace {

// Python's str.isprintable() for the characters repr() must escape; approximate outside
// Latin-1 (the common invisible format and space characters are covered).
bool py_printable(char32_t c) {
  if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return false;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
      (c >= 0x205f && c <= 0x2064) || c == 0x3000 || c == 0xfeff)
    return false;
  return true;
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    if (c == char32_t(quote) || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (py_printable(c)) {
      out += utf8_encode(std::u32string(1, c));
    } else if (c <= 0xff) {
      out += fmt::format("\\x{:02x}", uint32_t(c));
    } else {
      out += fmt::format("\\u{:04x}", uint32_t(c));
    }
  }
  out += quote;
  return out;
}

}  // namespace

namespace {

std::string repr_at(const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Kind::Undefined: return "Undefined";
    case Kind::String: return string_repr(v.as_string());
    case Kind::List: {
      const List& l = v.as_list();
      std::string out = l.is_tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        append_bounded(out, repr_at(l.items[i], depth + 1));  // shared sub-values can repeat exponentially
      }
      if (l.is_tuple && l.items.size() == 1) out += ",";
      return out + (l.is_tuple ? ")" : "]");
    }
    case Kind::Dict: {
      // (Appends rather than "<" + s + ">": GCC 12 warns falsely about the latter.)
      const Dict& d = v.as_dict();
      if (d.kind == Dict::Kind::Object) return fmt::format("<{}>", type_name(v));
      std::string out = d.kind == Dict::Kind::Namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < d.items.size(); ++i) {
        if (i) out += ", ";
        out += string_repr(d.items[i].first);
        out += ": ";
        append_bounded(out, repr_at(d.items[i].second, depth + 1));
      }
      out += d.kind == Dict::Kind::Namespace ? "}>" : "}";
      return out;
    }
    default: return to_str(v);
  }
}

}  // namespace

std::string to_repr(const Value& v) { return repr_at(v, 0); }

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return "";
    case Kind::None: return "None";
    case Kind::Bool: return v.as_bool() ? "True" : "False";
    case Kind::Int: return std::to_string(v.as_int());
    case Kind::Float: return float_repr(v.as_double());
    case Kind::String: return v.as_string();
    case Kind::Function: return "<function " + v.as_function().name + ">";
    default: return to_repr(v);
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined: return {};
    case Kind::List: spend_steps(int64_t(v.as_list().items.size())); return v.as_list().items;
    case Kind::String: {
      spend_steps(int64_t(v.as_string().size()));
      std::vector<Value> chars;
      for (char32_t c : utf8_decode(v.as_string())) chars.emplace_back(utf8_encode(std::u32string(1, c)));
      return chars;
    }
    case Kind::Dict:
      if (v.as_dict().kind == Dict::Kind::Dict) {
        spend_steps(int64_t(v.as_dict().items.size()));
        std::vector<Value> keys;
        for (const auto& kv : v.as_dict().items) keys.emplace_back(kv.first);
        return keys;
      }
      break;
    default: break;
  }
  fail_eval("'{}' object is not iterable", type_name(v));
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto b = uint8_t(s[i]);
    int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + size_t(len) > s.size()) {  // not UTF-8: one replacement per byte
      out += U'\uFFFD';
      ++i;
      continue;
    }
    char32_t c = len == 1 ? b : (b & (0x7f >> len));
    bool ok = true;
    for (int k = 1; k < len; ++k) {
      const auto cb = uint8_t(s[i + size_t(k)]);
      if ((cb & 0xc0) != 0x80) ok = false;
      c = (c << 6) | (cb & 0x3f);
    }
    if (!ok) {
      out += U'\uFFFD';
      ++i;
      continue;
    }
    out += c;
    i += size_t(len);
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80) {
      out += char(c);
    } else if (c < 0x800) {
      out += char(0xc0 | (c >> 6));
      out += char(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += char(0xe0 | (c >> 12));
      out += char(0x80 | ((c >> 6) & 0x3f));
      out += char(0x80 | (c & 0x3f));
    } else {
      out += char(0xf0 | (c >> 18));
      out += char(0x80 | ((c >> 12) & 0x3f));
      out += char(0x80 | ((c >> 6) & 0x3f));
      out += char(0x80 | (c & 0x3f));
    }
  }
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (uint8_t(c) & 0xc0) != 0x80;
  return n;
}

bool is_py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
         c == 0x202f || c == 0x205f || c == 0x3000;
}

}  // namespace tf::jinja
