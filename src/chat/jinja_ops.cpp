#include "chat/jinja_ops.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <cmath>

namespace tf::jinja {

namespace {

[[noreturn]] void fail_operands(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  fail_eval("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

// Python integers never overflow; ours are 64-bit and fail instead of wrapping.
[[noreturn]] void fail_overflow() { fail_eval("integer overflow (values beyond 64 bits are not supported)"); }
int64_t add_int(int64_t x, int64_t y) {
  int64_t r = 0;
  if (__builtin_add_overflow(x, y, &r)) fail_overflow();
  return r;
}
int64_t sub_int(int64_t x, int64_t y) {
  int64_t r = 0;
  if (__builtin_sub_overflow(x, y, &r)) fail_overflow();
  return r;
}
int64_t mul_int(int64_t x, int64_t y) {
  int64_t r = 0;
  if (__builtin_mul_overflow(x, y, &r)) fail_overflow();
  return r;
}

// The longest list (items) `seq * n` may build; strings stop at kMaxStringBytes. Python would
// try to allocate whatever is asked and raise MemoryError; a template from a model file must
// not be able to take the process down with [0] * 10**12, nor spin on "" * 10**18.
constexpr int64_t kMaxRepeatItems = int64_t(1) << 24;

Value repeat(const Value& seq, int64_t n) {
  n = std::max<int64_t>(n, 0);
  const auto len = int64_t(seq.is_string() ? seq.as_string().size() : seq.as_list().items.size());
  if (len == 0 || n == 0) return seq.is_string() ? Value(std::string()) : Value::list({}, seq.as_list().is_tuple);
  const int64_t max = seq.is_string() ? int64_t(kMaxStringBytes) : kMaxRepeatItems;
  if (n > max / len)
    fail_eval("repeating a {} of length {} {} times would exceed {} {}", type_name(seq), len, n, max,
              seq.is_string() ? "bytes" : "items");
  if (!seq.is_string()) spend_steps(len * n);
  if (seq.is_string()) {
    std::string out;
    out.reserve(size_t(len * n));
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return Value(std::move(out));
  }
  std::vector<Value> out;
  out.reserve(size_t(len * n));
  for (int64_t i = 0; i < n; ++i)
    out.insert(out.end(), seq.as_list().items.begin(), seq.as_list().items.end());
  return Value::list(std::move(out), seq.as_list().is_tuple);
}

// base ** exp by squaring: O(log exp) steps, so 1 ** 10**15 answers at once; overflow fails.
Value int_pow(int64_t base, int64_t exp) {
  if (exp < 0) return Value(std::pow(double(base), double(exp)));
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = mul_int(result, base);
    exp >>= 1;
    if (exp > 0) base = mul_int(base, base);
  }
  return Value(result);
}

}  // namespace

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  if (a.is_number() && b.is_number()) {
    if (op == "/") {
      if (b.as_double() == 0) fail_eval("division by zero");
      return Value(a.as_double() / b.as_double());
    }
    if (ints) {
      const int64_t x = a.as_int(), y = b.as_int();
      if (op == "+") return Value(add_int(x, y));
      if (op == "-") return Value(sub_int(x, y));
      if (op == "*") return Value(mul_int(x, y));
      if (op == "**") return int_pow(x, y);
      if (y == 0) fail_eval("integer division or modulo by zero");
      // Python rounds the quotient toward negative infinity; the remainder takes y's sign.
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        q -= 1;
        m += y;
      }
      if (op == "//") return Value(q);
      if (op == "%") return Value(m);
    } else {
      const double x = a.as_double(), y = b.as_double();
      if (op == "+") return Value(x + y);
      if (op == "-") return Value(x - y);
      if (op == "*") return Value(x * y);
      if (op == "**") return Value(std::pow(x, y));
      if (y == 0) fail_eval("float division or modulo by zero");
      // CPython's float divmod: the remainder takes y's sign, the quotient is floored.
      double mod = std::fmod(x, y);
      double div = (x - mod) / y;
      if (mod != 0) {
        if ((y < 0) != (mod < 0)) {
          mod += y;
          div -= 1.0;
        }
      } else {
        mod = std::copysign(0.0, y);
      }
      if (op == "%") return Value(mod);
      if (div == 0) return Value(std::copysign(0.0, x / y));
      double floored = std::floor(div);
      if (div - floored > 0.5) floored += 1.0;
      if (op == "//") return Value(floored);
    }
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_string_size(a.as_string().size() + b.as_string().size());
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
      spend_steps(int64_t(a.as_list().items.size() + b.as_list().items.size()));
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(items), a.as_list().is_tuple);
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
  }
  if (op == "%" && a.is_string()) return Value(percent_format(a.as_string(), b));
  fail_operands(op, a, b);
}

Value negate(const Value& v) {
  if (v.is_float()) return Value(-v.as_double());
  if (v.is_int() || v.is_bool()) return Value(sub_int(0, v.as_int()));
  if (v.is_undefined()) fail_undefined(v);
  fail_eval("bad operand type for unary -: '{}'", type_name(v));
}

Value unary_plus(const Value& v) {
  if (v.is_float()) return v;
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_undefined()) fail_undefined(v);
  fail_eval("bad operand type for unary +: '{}'", type_name(v));
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::String:
      if (!item.is_string())
        fail_eval("'in <string>' requires string as left operand, not {}", type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Kind::List:
      return std::any_of(container.as_list().items.begin(), container.as_list().items.end(),
                         [&](const Value& v) { return equals(v, item); });
    case Kind::Dict:
      if (container.as_dict().kind == Dict::Kind::Dict)
        return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
      break;
    case Kind::Undefined: return false;
    default: break;
  }
  fail_eval("argument of type '{}' is not iterable", type_name(container));
}

std::vector<Value> bind_args(std::string_view fn, const CallArgs& args,
                             std::initializer_list<std::string_view> names) {
  std::vector<Value> bound(names.size());
  std::vector<bool> given(names.size(), false);
  if (args.positional.size() > names.size())
    fail_eval("{}() takes at most {} arguments ({} given)", fn, names.size(), args.positional.size());
  for (size_t i = 0; i < args.positional.size(); ++i) {
    bound[i] = args.positional[i];
    given[i] = true;
  }
  for (const auto& [key, value] : args.keyword) {
    const auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) fail_eval("{}() got an unexpected keyword argument '{}'", fn, key);
    const size_t i = size_t(it - names.begin());
    if (given[i]) fail_eval("{}() got multiple values for argument '{}'", fn, key);
    bound[i] = value;
    given[i] = true;
  }
  return bound;
}

// ---- strings

std::string to_upper(const std::string& s) {
  std::string out;
  icu::UnicodeString::fromUTF8(s).toUpper(icu::Locale::getRoot()).toUTF8String(out);
  return out;
}

std::string to_lower(const std::string& s) {
  std::string out;
  icu::UnicodeString::fromUTF8(s).toLower(icu::Locale::getRoot()).toUTF8String(out);
  return out;
}

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::u32string u = utf8_decode(s);
  std::u32string set;
  const bool whitespace = chars.is_undefined() || chars.is_none();
  if (!whitespace) {
    if (!chars.is_string()) fail_eval("strip arg must be None or str, not {}", type_name(chars));
    set = utf8_decode(chars.as_string());
  }
  auto strip = [&](char32_t c) { return whitespace ? is_py_space(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip(u[b])) ++b;
  if (right)
    while (e > b && strip(u[e - 1])) --e;
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

namespace {

const std::string& need_string(const Value& v, std::string_view what) {
  if (!v.is_string()) fail_eval("{} must be a string, not {}", what, type_name(v));
  return v.as_string();
}

// str.split / str.rsplit. Without a separator: runs of whitespace, no empty parts.
Value split(const std::string& s, const Value& sep_v, const Value& maxsplit_v, bool from_right) {
  const int64_t maxsplit = maxsplit_v.is_undefined() ? -1 : maxsplit_v.as_int();
  std::vector<std::u32string> parts;
  const std::u32string u = utf8_decode(s);
  if (sep_v.is_undefined() || sep_v.is_none()) {
    // Words in reading order; with a limit, the unsplit rest keeps its inner whitespace.
    std::vector<std::pair<size_t, size_t>> words;
    for (size_t i = 0; i < u.size();) {
      while (i < u.size() && is_py_space(u[i])) ++i;
      if (i == u.size()) break;
      size_t j = i;
      while (j < u.size() && !is_py_space(u[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    // When the limit is reached, the last part (first for rsplit) is the unsplit rest of
    // the string, whitespace at its far end included: '  a  b '.split(None, 1) is ['a', 'b '].
    const size_t n = words.size();
    const size_t limit = maxsplit < 0 ? n : std::min(n, size_t(maxsplit) + 1);
    const bool rest = maxsplit >= 0 && limit == size_t(maxsplit) + 1;
    for (size_t k = 0; k < limit; ++k) {
      if (!from_right) {
        const size_t end = rest && k + 1 == limit ? u.size() : words[k].second;
        parts.push_back(u.substr(words[k].first, end - words[k].first));
      } else {
        const size_t idx = n - limit + k;
        const size_t begin = rest && k == 0 ? 0 : words[idx].first;
        parts.push_back(u.substr(begin, words[idx].second - begin));
      }
    }
  } else {
    const std::u32string sep = utf8_decode(need_string(sep_v, "separator"));
    if (sep.empty()) fail_eval("empty separator");
    int64_t done = 0;
    if (!from_right) {
      size_t start = 0;
      for (size_t at; (maxsplit < 0 || done < maxsplit) && (at = u.find(sep, start)) != std::u32string::npos; ++done) {
        parts.push_back(u.substr(start, at - start));
        start = at + sep.size();
      }
      parts.push_back(u.substr(start));
    } else {
      size_t end = u.size();
      std::vector<std::u32string> rev;
      while ((maxsplit < 0 || done < maxsplit) && end >= sep.size()) {
        const size_t at = u.rfind(sep, end - sep.size());
        if (at == std::u32string::npos) break;
        rev.push_back(u.substr(at + sep.size(), end - at - sep.size()));
        end = at;
        ++done;
      }
      rev.push_back(u.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
  }
  std::vector<Value> out;
  for (const auto& p : parts) out.emplace_back(utf8_encode(p));
  return Value::list(std::move(out));
}

// Python's str.splitlines(): \n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029.
Value splitlines(const std::string& s, bool keepends) {
  const std::u32string u = utf8_decode(s);
  std::vector<Value> out;
  size_t start = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    const char32_t c = u[i];
    const bool brk = c == '\n' || c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e) ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) continue;
    size_t end = i + 1;
    if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') end = i + 2;
    out.emplace_back(utf8_encode(u.substr(start, (keepends ? end : i) - start)));
    start = end;
    i = end - 1;
  }
  if (start < u.size()) out.emplace_back(utf8_encode(u.substr(start)));
  return Value::list(std::move(out));
}

// str.startswith / endswith: a string or a tuple of strings.
bool affix(const std::string& s, const Value& arg, bool prefix) {
  auto one = [&](const Value& v) {
    const std::string& a = need_string(v, prefix ? "startswith argument" : "endswith argument");
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (arg.is_list()) return std::any_of(arg.as_list().items.begin(), arg.as_list().items.end(), one);
  return one(arg);
}

// Python's str.title(): a cased character after an uncased one starts a word.
std::string py_title(const std::string& s) {
  std::u32string u = utf8_decode(s);
  bool prev_cased = false;
  for (char32_t& c : u) {
    const bool cased = u_isUUppercase(UChar32(c)) || u_isULowercase(UChar32(c)) || u_istitle(UChar32(c));
    c = char32_t(prev_cased ? u_tolower(UChar32(c)) : u_totitle(UChar32(c)));
    prev_cased = cased;
  }
  return utf8_encode(u);
}

// Python's str.format(): {} {0} {name} and {{ }}; format specs and conversions unsupported.
std::string str_format(const std::string& fmt_str, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt_str.size(); ++i) {
    const char c = fmt_str[i];
    if (c == '{' && i + 1 < fmt_str.size() && fmt_str[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt_str.size() && fmt_str[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t close = fmt_str.find('}', i);
      if (close == std::string::npos) fail_eval("str.format: single '{{' in format string");
      const std::string field = fmt_str.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos)
        fail_eval("str.format: field '{{{}}}' uses a format spec or conversion, which is not supported", field);
      const Value* v = nullptr;
      if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        const size_t idx = field.empty() ? auto_index++ : size_t(std::stoul(field));
        if (idx >= args.positional.size()) fail_eval("str.format: replacement index {} out of range", idx);
        v = &args.positional[idx];
      } else {
        for (const auto& [k, val] : args.keyword)
          if (k == field) v = &val;
        if (!v) fail_eval("str.format: no argument named '{}'", field);
      }
      out += to_str(*v);
      i = close;
    } else if (c == '}') {
      fail_eval("str.format: single '}}' in format string");
    } else {
      out += c;
    }
  }
  return out;
}

bool all_chars(const std::string& s, bool (*pred)(UChar32)) {
  const std::u32string u = utf8_decode(s);
  return !u.empty() && std::all_of(u.begin(), u.end(), [&](char32_t c) { return pred(UChar32(c)); });
}

bool u_is_space(UChar32 c) { return is_py_space(char32_t(c)); }
bool u_is_digit(UChar32 c) { return u_isdigit(c); }
bool u_is_alpha(UChar32 c) { return u_isalpha(c); }
bool u_is_alnum(UChar32 c) { return u_isalnum(c); }

// Python's islower()/isupper(): some cased character, and none of the other case.
bool has_case(const std::string& s, bool lower) {
  bool cased = false;
  for (char32_t c : utf8_decode(s)) {
    if (lower ? u_isUUppercase(UChar32(c)) || u_istitle(UChar32(c)) : u_isULowercase(UChar32(c)) || u_istitle(UChar32(c))) return false;
    if (lower ? u_isULowercase(UChar32(c)) : u_isUUppercase(UChar32(c))) cased = true;
  }
  return cased;
}

Value string_method(const std::string& s, const std::string& name, const CallArgs& args) {
  auto bind = [&](std::initializer_list<std::string_view> names) { return bind_args("str." + name, args, names); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const auto a = bind({"chars"});
    return Value(py_strip(s, a[0], name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const auto a = bind({"sep", "maxsplit"});
    return split(s, a[0], a[1], name == "rsplit");
  }
  if (name == "splitlines") return splitlines(s, truthy(bind({"keepends"})[0]));
  if (name == "startswith" || name == "endswith") {
    const auto a = bind({"prefix"});
    return Value(affix(s, a[0], name == "startswith"));
  }
  if (name == "replace") {
    const auto a = bind({"old", "new", "count"});
    const std::string& from = need_string(a[0], "replace argument");
    const std::string& to = need_string(a[1], "replace argument");
    int64_t count = a[2].is_undefined() ? -1 : a[2].as_int();
    std::string out;
    if (from.empty()) {  // Python inserts `to` around every character
      const std::u32string u = utf8_decode(s);
      for (size_t i = 0; i <= u.size(); ++i) {
        if (count < 0 || int64_t(i) < count) append_bounded(out, to);
        if (i < u.size()) append_bounded(out, utf8_encode(u.substr(i, 1)));
      }
      return Value(std::move(out));
    }
    size_t start = 0;
    for (size_t at; count != 0 && (at = s.find(from, start)) != std::string::npos; --count) {
      append_bounded(out, std::string_view(s).substr(start, at - start));
      append_bounded(out, to);
      start = at + from.size();
    }
    append_bounded(out, std::string_view(s).substr(start));
    return Value(std::move(out));
  }
  if (name == "upper") return bind({}), Value(to_upper(s));
  if (name == "lower") return bind({}), Value(to_lower(s));
  if (name == "title") return bind({}), Value(py_title(s));
  if (name == "capitalize") {
    bind({});
    const std::u32string u = utf8_decode(s);
    if (u.empty()) return Value(s);
    return Value(to_upper(utf8_encode(u.substr(0, 1))) + to_lower(utf8_encode(u.substr(1))));
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index" || name == "rindex") {
    const auto a = bind({"sub"});
    const std::u32string u = utf8_decode(s);
    const std::u32string sub = utf8_decode(need_string(a[0], "argument"));
    if (name == "count") {
      if (sub.empty()) return Value(int64_t(u.size() + 1));
      int64_t n = 0;
      for (size_t at = u.find(sub); at != std::u32string::npos; at = u.find(sub, at + sub.size())) ++n;
      return Value(n);
    }
    const size_t at = name[0] == 'r' ? u.rfind(sub) : u.find(sub);
    if (at == std::u32string::npos) {
      if (name.find("index") != std::string::npos) fail_eval("substring not found");
      return Value(int64_t(-1));
    }
    return Value(int64_t(at));
  }
  if (name == "join") {
    const auto a = bind({"iterable"});
    std::string out;
    bool first = true;
    for (const Value& v : iterate(a[0])) {
      if (!v.is_string()) fail_eval("str.join: expected str items, found {}", type_name(v));
      if (!first) append_bounded(out, s);
      append_bounded(out, v.as_string());
      first = false;
    }
    return Value(std::move(out));
  }
  if (name == "format") return Value(str_format(s, args));
  if (name == "removeprefix" || name == "removesuffix") {
    const auto bound_args = bind({"affix"});
    const std::string& a = need_string(bound_args[0], "argument");
    if (name == "removeprefix") return Value(s.compare(0, a.size(), a) == 0 && a.size() <= s.size() ? s.substr(a.size()) : s);
    const bool ends = a.size() <= s.size() && s.compare(s.size() - a.size(), a.size(), a) == 0;
    return Value(ends ? s.substr(0, s.size() - a.size()) : s);
  }
  if (name == "isspace") return bind({}), Value(all_chars(s, u_is_space));
  if (name == "isdigit") return bind({}), Value(all_chars(s, u_is_digit));
  if (name == "isalpha") return bind({}), Value(all_chars(s, u_is_alpha));
  if (name == "isalnum") return bind({}), Value(all_chars(s, u_is_alnum));
  if (name == "islower") return bind({}), Value(has_case(s, /*lower=*/true));
  if (name == "isupper") return bind({}), Value(has_case(s, /*lower=*/false));
  fail_eval("'str' object has no attribute '{}'", name);
}

bool is_string_method(const std::string& name) {
  static const char* const kNames[] = {
      "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
      "replace", "upper", "lower", "title", "capitalize", "find", "rfind", "index", "rindex",
      "count", "join", "format", "removeprefix", "removesuffix", "isspace", "isdigit",
      "isalpha", "isalnum", "islower", "isupper"};
  return std::any_of(std::begin(kNames), std::end(kNames), [&](const char* n) { return name == n; });
}

Value bound(const Value& self, const std::string& type, const std::string& name,
            Value (*method)(const Value&, const std::string&, const CallArgs&)) {
  return Value::function(type + "." + name, [self, name, method](CallArgs& args) { return method(self, name, args); });
}

Value dict_method(const Value& self, const std::string& name, const CallArgs& args) {
  const Dict& d = self.as_dict();
  if (name == "items" || name == "keys" || name == "values") {
    bind_args("dict." + name, args, {});
    std::vector<Value> out;
    for (const auto& [k, v] : d.items) {
      if (name == "items") out.push_back(Value::list({Value(k), v}, /*is_tuple=*/true));
      else out.push_back(name == "keys" ? Value(k) : v);
    }
    return Value::list(std::move(out));
  }
  if (name == "get") {
    const auto a = bind_args("dict.get", args, {"key", "default"});
    const Value* v = a[0].is_string() ? d.find(a[0].as_string()) : nullptr;
    if (v) return *v;
    return a[1].is_undefined() ? Value(nullptr) : a[1];
  }
  fail_eval("access to attribute '{}' of 'dict' object is unsafe (templates may not modify data)", name);
}

Value list_method(const Value& self, const std::string& name, const CallArgs& args) {
  const auto& items = self.as_list().items;
  if (name == "index" || name == "count") {
    const auto a = bind_args("list." + name, args, {"value"});
    int64_t n = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!equals(items[i], a[0])) continue;
      if (name == "index") return Value(int64_t(i));
      ++n;
    }
    if (name == "index") fail_eval("{} is not in list", to_repr(a[0]));
    return Value(n);
  }
  fail_eval("access to attribute '{}' of '{}' object is unsafe (templates may not modify data)", name, type_name(self));
}

Value str_method_entry(const Value& self, const std::string& name, const CallArgs& args) {
  return string_method(self.as_string(), name, args);
}

// Python's slice.indices(): the start, stop and step a slice of `len` items walks.
void slice_indices(int64_t len, const Value& start_v, const Value& stop_v, const Value& step_v,
                   int64_t& start, int64_t& stop, int64_t& step) {
  auto given = [](const Value& v) { return !v.is_undefined() && !v.is_none(); };
  auto need_int = [](const Value& v) {
    if (!v.is_int() && !v.is_bool()) fail_eval("slice indices must be integers or None, not {}", type_name(v));
    return v.as_int();
  };
  step = given(step_v) ? need_int(step_v) : 1;
  if (step == 0) fail_eval("slice step cannot be zero");
  const int64_t lower = step < 0 ? -1 : 0;
  const int64_t upper = step < 0 ? len - 1 : len;
  auto clamp = [&](const Value& v, int64_t dflt) {
    if (!given(v)) return dflt;
    int64_t i = need_int(v);
    if (i < 0) i = std::max(i + len, lower);
    else i = std::min(i, upper);
    return i;
  };
  start = clamp(start_v, step < 0 ? upper : lower);
  stop = clamp(stop_v, step < 0 ? lower : upper);
}

}  // namespace

Value get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::Undefined: fail_undefined(obj);
    case Kind::String:
      if (is_string_method(name)) return bound(obj, "str", name, str_method_entry);
      break;
    case Kind::Dict: {
      const Dict& d = obj.as_dict();
      if (d.kind == Dict::Kind::Dict) {
        static const char* const kMethods[] = {"items", "keys", "values", "get", "pop", "popitem",
                                               "setdefault", "update", "clear"};
        for (const char* m : kMethods)
          if (name == m) return bound(obj, "dict", name, dict_method);
      }
      if (const Value* v = d.find(name)) return *v;
      break;
    }
    case Kind::List: {
      static const char* const kMethods[] = {"index", "count", "append", "extend", "insert",
                                             "pop", "remove", "reverse", "sort", "clear"};
      for (const char* m : kMethods)
        if (name == m) return bound(obj, "list", name, list_method);
      break;
    }
    default: break;
  }
  return Value::undefined(fmt::format("'{}' has no attribute '{}'",
                                      obj.is_mapping() ? "dict object" : type_name(obj) + " object", name));
}

Value get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Kind::Undefined: fail_undefined(obj);
    case Kind::Dict:
      if (key.is_string()) {
        if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
        return get_attr(obj, key.as_string());
      }
      break;
    case Kind::List:
    case Kind::String:
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_int();
        if (obj.is_list()) {
          const auto& items = obj.as_list().items;
          if (i < 0) i += int64_t(items.size());
          if (i >= 0 && i < int64_t(items.size())) return items[size_t(i)];
        } else {
          const std::u32string u = utf8_decode(obj.as_string());
          if (i < 0) i += int64_t(u.size());
          if (i >= 0 && i < int64_t(u.size())) return Value(utf8_encode(u.substr(size_t(i), 1)));
        }
      } else if (key.is_string()) {
        return get_attr(obj, key.as_string());
      }
      break;
    default: break;
  }
  return Value::undefined(fmt::format("'{}' has no attribute '{}'",
                                      obj.is_mapping() ? "dict object" : type_name(obj) + " object", to_str(key)));
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!obj.is_list() && !obj.is_string()) fail_eval("'{}' object is not subscriptable", type_name(obj));
  const std::u32string u = obj.is_string() ? utf8_decode(obj.as_string()) : std::u32string();
  const int64_t len = obj.is_string() ? int64_t(u.size()) : int64_t(obj.as_list().items.size());
  int64_t start = 0, stop = 0, step = 1;
  slice_indices(len, start_v, stop_v, step_v, start, stop, step);
  std::u32string s;
  std::vector<Value> items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (obj.is_string()) s += u[size_t(i)];
    else items.push_back(obj.as_list().items[size_t(i)]);
  }
  if (obj.is_string()) return Value(utf8_encode(s));
  return Value::list(std::move(items), obj.as_list().is_tuple);
}

namespace {

// Widths and precisions beyond this fail: far above any template's need, and a width of 2^31
// would have printf count two billion characters.
constexpr int64_t kMaxFormatWidth = 1 << 16;

// The digits at `j` as a number (0 when there are none), failing past kMaxFormatWidth.
int64_t format_number(const std::string& format, size_t& j, std::string_view what) {
  int64_t n = 0;
  for (; j < format.size() && std::isdigit(uint8_t(format[j])); ++j) {
    n = n * 10 + (format[j] - '0');
    if (n > kMaxFormatWidth) fail_eval("format {} is larger than {}", what, kMaxFormatWidth);
  }
  return n;
}

// printf of one number, however long the result.
template <typename T>
std::string printf_one(const std::string& spec, T value) {
  const int n = std::snprintf(nullptr, 0, spec.c_str(), value);
  if (n < 0) fail_eval("invalid format '{}'", spec);
  std::string out(size_t(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), spec.c_str(), value);
  out.resize(size_t(n));
  return out;
}

}  // namespace

std::string percent_format(const std::string& format, const Value& args) {
  std::vector<Value> values = args.is_list() && args.as_list().is_tuple ? args.as_list().items : std::vector<Value>{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    // %[flags][width][.precision]type
    size_t j = i + 1;
    std::string flags;
    while (j < format.size() && std::string_view("-+ 0#").find(format[j]) != std::string_view::npos) flags += format[j++];
    const int64_t width = format_number(format, j, "width");
    int64_t precision = -1;
    if (j < format.size() && format[j] == '.') precision = format_number(format, ++j, "precision");
    if (j >= format.size()) fail_eval("incomplete format");
    const char type = format[j];
    i = j;
    if (type == '%') {
      out += '%';
      continue;
    }
    if (next >= values.size()) fail_eval("not enough arguments for format string");
    const Value& v = values[next++];
    std::string spec = "%" + flags + (width > 0 ? std::to_string(width) : "");
    if (precision >= 0) spec += "." + std::to_string(precision);
    std::string piece;
    if (type == 's' || type == 'r') {
      // Python counts characters, not bytes: the precision cuts, the width pads with spaces.
      piece = type == 's' ? to_str(v) : to_repr(v);
      if (precision >= 0 && utf8_length(piece) > size_t(precision))
        piece = utf8_encode(utf8_decode(piece).substr(0, size_t(precision)));
      const size_t len = utf8_length(piece);
      if (size_t(width) > len) {
        const std::string pad(size_t(width) - len, ' ');
        piece = flags.find('-') != std::string::npos ? piece + pad : pad + piece;
      }
    } else if (type == 'd' || type == 'i') {
      if (!v.is_number()) fail_eval("%{} format: a real number is required, not {}", type, type_name(v));
      const auto n = v.is_float() ? (long long)float_to_int(v.as_double(), "%d format") : (long long)v.as_int();
      piece = printf_one(spec + "lld", n);
    } else if (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == 'g' || type == 'G') {
      if (!v.is_number()) fail_eval("%{} format: a real number is required, not {}", type, type_name(v));
      piece = printf_one(spec + type, v.as_double());
    } else if (type == 'x' || type == 'X' || type == 'o') {
      if (!v.is_int() && !v.is_bool()) fail_eval("%{} format: an integer is required, not {}", type, type_name(v));
      piece = printf_one(spec + "ll" + type, (long long)v.as_int());
    } else {
      fail_eval("unsupported format character '{}'", type);
    }
    append_bounded(out, piece);
  }
  if (next < values.size()) fail_eval("not all arguments converted during string formatting");
  return out;
}

}  // namespace tf::jinja
