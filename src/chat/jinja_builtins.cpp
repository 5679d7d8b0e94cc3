#include "chat/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <utility>

#include "chat/jinja_json.h"
#include "chat/jinja_ops.h"
#include "core/error.h"

namespace tf::jinja {

namespace {

// ---- helpers

int64_t need_int(const Value& v, std::string_view what) {
  if (!v.is_int() && !v.is_bool()) fail_eval("{} must be an integer, not {}", what, type_name(v));
  return v.as_int();
}

bool flag(const Value& v, bool dflt) { return v.is_undefined() ? dflt : truthy(v); }

// `n` spaces (an indent width; negative is none), within kMaxStringBytes.
std::string spaces(int64_t n) {
  n = std::max<int64_t>(n, 0);
  check_string_size(size_t(n));
  return std::string(size_t(n), ' ');
}

// jinja2's attribute getter for filters: "a.b.0" looks up a, then b, then item 0.
Value attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = get_item(cur, numeric ? Value(int64_t(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// The key sort/unique/min/max compare by: the attribute if given, lowercased strings unless
// case_sensitive.
Value sort_key(const Value& v, const Value& attribute, bool case_sensitive) {
  Value k = attribute.is_undefined() || attribute.is_none() ? v : attr_path(v, to_str(attribute));
  if (!case_sensitive && k.is_string()) return Value(to_lower(k.as_string()));
  return k;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Python's round(x, ndigits) for floats: the decimal nearest the exact binary value, ties
// to even (fmt's fixed-precision output rounds the exact value the same way).
double py_round(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits < 0) {
    const double scale = std::pow(10.0, double(-digits));
    return std::nearbyint(x / scale) * scale;
  }
  return std::stod(fmt::format("{:.{}f}", x, int(std::min<int64_t>(digits, 300))));
}

// ---- filters

Value f_abs(const Value& v, const CallArgs& a) {
  bind_args("abs", a, {});
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) return v.as_int() < 0 ? negate(v) : Value(v.as_int());
  fail_eval("bad operand type for abs(): '{}'", type_name(v));
}

// attr(name) looks up a Python attribute only, never a dict key (unlike `x.name`), so on a
// dict it finds just the methods.
Value f_attr(const Value& v, const CallArgs& a) {
  const auto p = bind_args("attr", a, {"name"});
  const std::string name = to_str(p[0]);
  const Value found = get_attr(v, name);
  if (v.is_mapping() && !found.is_function())
    return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
  return found;
}

Value f_capitalize(const Value& v, const CallArgs& a) {
  bind_args("capitalize", a, {});
  const std::u32string u = utf8_decode(to_str(v));
  if (u.empty()) return Value("");
  return Value(to_upper(utf8_encode(u.substr(0, 1))) + to_lower(utf8_encode(u.substr(1))));
}

Value f_length(const Value& v, const CallArgs& a) {
  bind_args("length", a, {});
  switch (v.kind()) {
    case Kind::Undefined: return Value(int64_t(0));
    case Kind::String: return Value(int64_t(utf8_length(v.as_string())));
    case Kind::List: return Value(int64_t(v.as_list().items.size()));
    case Kind::Dict:
      if (v.is_mapping()) return Value(int64_t(v.as_dict().items.size()));
      break;
    default: break;
  }
  fail_eval("object of type '{}' has no len()", type_name(v));
}

Value f_default(const Value& v, const CallArgs& a) {
  const auto p = bind_args("default", a, {"default_value", "boolean"});
  if (v.is_undefined() || (flag(p[1], false) && !truthy(v))) return p[0].is_undefined() ? Value("") : p[0];
  return v;
}

Value f_dictsort(const Value& v, const CallArgs& a) {
  const auto p = bind_args("dictsort", a, {"case_sensitive", "by", "reverse"});
  if (!v.is_mapping()) fail_eval("dictsort expects a dict, got {}", type_name(v));
  const bool by_value = p[1].is_string() && p[1].as_string() == "value";
  if (!p[1].is_undefined() && !by_value && !(p[1].is_string() && p[1].as_string() == "key"))
    fail_eval("dictsort: 'by' must be 'key' or 'value'");
  std::vector<Value> items;
  for (const auto& [k, val] : v.as_dict().items) items.push_back(Value::list({Value(k), val}, true));
  const bool cs = flag(p[0], false);
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const size_t i = by_value ? 1 : 0;
    return compare(sort_key(x.as_list().items[i], Value(), cs), sort_key(y.as_list().items[i], Value(), cs)) < 0;
  });
  if (flag(p[2], false)) std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_escape(const Value& v, const CallArgs& a) {
  bind_args("escape", a, {});
  return Value(html_escape(to_str(v)));
}

Value f_first(const Value& v, const CallArgs& a) {
  bind_args("first", a, {});
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(const Value& v, const CallArgs& a) {
  bind_args("last", a, {});
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_float(const Value& v, const CallArgs& a) {
  const auto p = bind_args("float", a, {"default"});
  const Value dflt = p[0].is_undefined() ? Value(0.0) : p[0];
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    const std::string s = py_strip(v.as_string(), Value(), true, true);
    size_t used = 0;
    try {
      const double d = std::stod(s, &used);
      if (used == s.size() && !s.empty()) return Value(d);
    } catch (const std::exception&) {
    }
  }
  return dflt;
}

Value f_int(const Value& v, const CallArgs& a) {
  const auto p = bind_args("int", a, {"default", "base"});
  const Value dflt = p[0].is_undefined() ? Value(int64_t(0)) : p[0];
  const int base = p[1].is_undefined() ? 10 : int(need_int(p[1], "base"));
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return std::isfinite(v.as_double()) ? Value(float_to_int(v.as_double(), "int")) : dflt;
  if (v.is_string()) {
    std::string s = py_strip(v.as_string(), Value(), true, true);
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    if (!s.empty()) {
      size_t used = 0;
      try {
        const long long n = std::stoll(s, &used, base);
        if (used == s.size()) return Value(int64_t(n));
      } catch (const std::exception&) {
      }
      try {  // jinja2 falls back to int(float(s))
        const double d = std::stod(s, &used);
        if (used == s.size() && std::isfinite(d)) return Value(float_to_int(d, "int"));
      } catch (const std::exception&) {
      }
    }
  }
  return dflt;
}

Value f_indent(const Value& v, const CallArgs& a) {
  const auto p = bind_args("indent", a, {"width", "first", "blank"});
  const std::string indent = p[0].is_string() ? p[0].as_string() : spaces(p[0].is_undefined() ? 4 : need_int(p[0], "width"));
  // jinja2: s += "\n", then splitlines(), so a trailing newline never gets indented.
  CallArgs no_args;
  const Value lines_v = get_attr(Value(to_str(v) + "\n"), "splitlines").as_function().call(no_args);
  const auto& lines = lines_v.as_list().items;
  std::string out;
  if (flag(p[2], false)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) append_bounded(out, "\n" + indent);
      append_bounded(out, lines[i].as_string());
    }
  } else {
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string& line = lines[i].as_string();
      if (i > 0) append_bounded(out, "\n" + (line.empty() ? "" : indent));
      append_bounded(out, line);
    }
  }
  if (flag(p[1], false)) {
    check_string_size(indent.size() + out.size());
    out = indent + out;
  }
  return Value(std::move(out));
}

Value f_items(const Value& v, const CallArgs& a) {
  bind_args("items", a, {});
  if (v.is_undefined()) return Value::list();
  if (!v.is_mapping()) fail_eval("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict().items) out.push_back(Value::list({Value(k), val}, true));
  return Value::list(std::move(out));
}

Value f_join(const Value& v, const CallArgs& a) {
  const auto p = bind_args("join", a, {"d", "attribute"});
  const std::string sep = p[0].is_undefined() ? "" : to_str(p[0]);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) append_bounded(out, sep);
    append_bounded(out, to_str(p[1].is_undefined() ? item : attr_path(item, to_str(p[1]))));
    first = false;
  }
  return Value(std::move(out));
}

Value f_list(const Value& v, const CallArgs& a) {
  bind_args("list", a, {});
  return Value::list(iterate(v));
}

Value f_lower(const Value& v, const CallArgs& a) {
  bind_args("lower", a, {});
  return Value(to_lower(to_str(v)));
}

Value f_upper(const Value& v, const CallArgs& a) {
  bind_args("upper", a, {});
  return Value(to_upper(to_str(v)));
}

// map(attribute='x', default=d) or map('filter', args...).
Value f_map(const Value& v, const CallArgs& a) {
  std::vector<Value> out;
  const std::vector<Value> items = iterate(v);
  if (a.positional.empty()) {
    const auto p = bind_args("map", a, {"attribute", "default"});
    if (p[0].is_undefined()) fail_eval("map: give a filter name or attribute=");
    for (const Value& item : items) {
      Value x = attr_path(item, to_str(p[0]));
      out.push_back(x.is_undefined() && !p[1].is_undefined() ? p[1] : x);
    }
    return Value::list(std::move(out));
  }
  const std::string name = to_str(a.positional[0]);
  const FilterFn f = find_filter(name);
  if (!f) fail_eval("map: no filter named '{}'", name);
  CallArgs rest{{a.positional.begin() + 1, a.positional.end()}, a.keyword};
  for (const Value& item : items) out.push_back(f(item, rest));
  return Value::list(std::move(out));
}

// select/reject(test, args...) and selectattr/rejectattr(attribute, test, args...).
Value select_impl(const Value& v, const CallArgs& a, bool by_attr, bool keep) {
  const char* fn = by_attr ? (keep ? "selectattr" : "rejectattr") : (keep ? "select" : "reject");
  if (!a.keyword.empty()) fail_eval("{}() takes no keyword arguments", fn);
  size_t i = 0;
  std::string attribute;
  if (by_attr) {
    if (a.positional.empty()) fail_eval("{}() needs an attribute name", fn);
    attribute = to_str(a.positional[i++]);
  }
  TestFn test = nullptr;
  if (i < a.positional.size()) {
    const std::string name = to_str(a.positional[i++]);
    test = find_test(name);
    if (!test) fail_eval("{}: no test named '{}'", fn, name);
  }
  CallArgs rest{{a.positional.begin() + long(i), a.positional.end()}, {}};
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    const Value x = by_attr ? attr_path(item, attribute) : item;
    if ((test ? test(x, rest) : truthy(x)) == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_select(const Value& v, const CallArgs& a) { return select_impl(v, a, false, true); }
Value f_reject(const Value& v, const CallArgs& a) { return select_impl(v, a, false, false); }
Value f_selectattr(const Value& v, const CallArgs& a) { return select_impl(v, a, true, true); }
Value f_rejectattr(const Value& v, const CallArgs& a) { return select_impl(v, a, true, false); }

Value min_max(const Value& v, const CallArgs& a, bool is_max) {
  const auto p = bind_args(is_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  const std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined(fmt::format("No aggregated item, sequence was empty."));
  const bool cs = flag(p[0], false);
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    const int c = compare(sort_key(items[i], p[1], cs), sort_key(items[best], p[1], cs));
    if (is_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

Value f_max(const Value& v, const CallArgs& a) { return min_max(v, a, true); }
Value f_min(const Value& v, const CallArgs& a) { return min_max(v, a, false); }

Value f_replace(const Value& v, const CallArgs& a) {
  const auto p = bind_args("replace", a, {"old", "new", "count"});
  CallArgs call{{Value(to_str(p[0])), Value(to_str(p[1]))}, {}};
  if (!p[2].is_undefined() && !p[2].is_none()) call.positional.push_back(p[2]);
  return get_attr(Value(to_str(v)), "replace").as_function().call(call);
}

Value f_reverse(const Value& v, const CallArgs& a) {
  bind_args("reverse", a, {});
  if (v.is_string()) {
    std::u32string u = utf8_decode(v.as_string());
    std::reverse(u.begin(), u.end());
    return Value(utf8_encode(u));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_round(const Value& v, const CallArgs& a) {
  const auto p = bind_args("round", a, {"precision", "method"});
  const int64_t precision = p[0].is_undefined() ? 0 : need_int(p[0], "precision");
  const std::string method = p[1].is_undefined() ? "common" : to_str(p[1]);
  if (!v.is_number()) fail_eval("round expects a number, got {}", type_name(v));
  if (method == "common") {
    if (!v.is_float()) return Value(v.as_int());  // Python: round(int, n) stays an int
    return Value(py_round(v.as_double(), precision));
  }
  if (method != "ceil" && method != "floor") fail_eval("round: method must be 'common', 'ceil' or 'floor'");
  const double scale = std::pow(10.0, double(precision));
  const double x = v.as_double() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_safe(const Value& v, const CallArgs& a) {
  bind_args("safe", a, {});
  return v;
}

Value f_sort(const Value& v, const CallArgs& a) {
  const auto p = bind_args("sort", a, {"reverse", "case_sensitive", "attribute"});
  std::vector<Value> items = iterate(v);
  const bool rev = flag(p[0], false), cs = flag(p[1], false);
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    const int c = compare(sort_key(x, p[2], cs), sort_key(y, p[2], cs));
    return rev ? c > 0 : c < 0;
  });
  return Value::list(std::move(items));
}

Value f_string(const Value& v, const CallArgs& a) {
  bind_args("string", a, {});
  return Value(to_str(v));
}

Value f_sum(const Value& v, const CallArgs& a) {
  const auto p = bind_args("sum", a, {"attribute", "start"});
  Value total = p[1].is_undefined() ? Value(int64_t(0)) : p[1];
  for (const Value& item : iterate(v))
    total = binary_op("+", total, p[0].is_undefined() ? item : attr_path(item, to_str(p[0])));
  return total;
}

// jinja2's title filter: words start after whitespace or one of - ( { [ <.
Value f_title(const Value& v, const CallArgs& a) {
  bind_args("title", a, {});
  const std::u32string u = utf8_decode(to_str(v));
  std::string out;
  bool start = true;
  for (char32_t c : u) {
    const std::string ch = utf8_encode(std::u32string(1, c));
    const bool sep = is_py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    out += sep ? ch : (start ? to_upper(ch) : to_lower(ch));
    start = sep;
  }
  return Value(std::move(out));
}

// Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False), so ", " and ": " on one line and no HTML escaping.
Value f_tojson(const Value& v, const CallArgs& a) {
  const auto p = bind_args("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  DumpOptions opts;
  opts.ensure_ascii = flag(p[0], false);
  if (!p[1].is_undefined() && !p[1].is_none())
    opts.indent = p[1].is_string() ? p[1].as_string() : spaces(need_int(p[1], "indent"));
  if (!p[2].is_undefined() && !p[2].is_none()) {
    if (!p[2].is_list() || p[2].as_list().items.size() != 2) fail_eval("tojson: separators must be a pair of strings");
    opts.item_separator = to_str(p[2].as_list().items[0]);
    opts.key_separator = to_str(p[2].as_list().items[1]);
  }
  opts.sort_keys = flag(p[3], false);
  return Value(dumps(v, opts));
}

Value f_trim(const Value& v, const CallArgs& a) {
  const auto p = bind_args("trim", a, {"chars"});
  return Value(py_strip(to_str(v), p[0], true, true));
}

Value f_unique(const Value& v, const CallArgs& a) {
  const auto p = bind_args("unique", a, {"case_sensitive", "attribute"});
  const bool cs = flag(p[0], false);
  std::vector<Value> out, seen;
  for (const Value& item : iterate(v)) {
    const Value k = sort_key(item, p[1], cs);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
    seen.push_back(k);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_format(const Value& v, const CallArgs& a) {
  if (!a.keyword.empty()) fail_eval("format filter: keyword arguments are not supported");
  return Value(percent_format(to_str(v), Value::list(a.positional, /*is_tuple=*/true)));
}

Value f_wordcount(const Value& v, const CallArgs& a) {
  bind_args("wordcount", a, {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8_decode(to_str(v))) {
    const bool w = c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c > 0x7f;
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

// ---- tests

bool t_defined(const Value& v, const CallArgs&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, const CallArgs&) { return v.is_undefined(); }
bool t_none(const Value& v, const CallArgs&) { return v.is_none(); }
bool t_boolean(const Value& v, const CallArgs&) { return v.is_bool(); }
bool t_true(const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(const Value& v, const CallArgs&) { return v.is_int(); }
bool t_float(const Value& v, const CallArgs&) { return v.is_float(); }
bool t_number(const Value& v, const CallArgs&) { return v.is_number(); }
bool t_string(const Value& v, const CallArgs&) { return v.is_string(); }
bool t_mapping(const Value& v, const CallArgs&) { return v.is_mapping(); }
bool t_sequence(const Value& v, const CallArgs&) { return v.is_string() || v.is_list() || v.is_mapping(); }
bool t_iterable(const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_mapping();
}
bool t_callable(const Value& v, const CallArgs&) { return v.is_function(); }
bool call_str_predicate(const Value& v, const char* method) {
  CallArgs no_args;
  return get_attr(Value(to_str(v)), method).as_function().call(no_args).as_bool();
}
bool t_lower(const Value& v, const CallArgs&) { return call_str_predicate(v, "islower"); }
bool t_upper(const Value& v, const CallArgs&) { return call_str_predicate(v, "isupper"); }
bool t_odd(const Value& v, const CallArgs&) { return need_int(v, "odd test value") % 2 != 0; }
bool t_even(const Value& v, const CallArgs&) { return need_int(v, "even test value") % 2 == 0; }
bool t_divisibleby(const Value& v, const CallArgs& a) {
  const auto p = bind_args("divisibleby", a, {"num"});
  const int64_t d = need_int(p[0], "divisibleby argument");
  if (d == 0) fail_eval("integer division or modulo by zero");
  return need_int(v, "divisibleby test value") % d == 0;
}
bool t_sameas(const Value& v, const CallArgs& a) { return v.same_object(bind_args("sameas", a, {"other"})[0]); }
bool t_in(const Value& v, const CallArgs& a) { return contains(bind_args("in", a, {"seq"})[0], v); }
bool t_filter(const Value& v, const CallArgs&) { return v.is_string() && has_filter(v.as_string()); }
bool t_test(const Value& v, const CallArgs&) { return v.is_string() && has_test(v.as_string()); }


bool t_eq(const Value& v, const CallArgs& a) { return equals(v, bind_args("eq", a, {"other"})[0]); }
bool t_ne(const Value& v, const CallArgs& a) { return !equals(v, bind_args("ne", a, {"other"})[0]); }
bool t_lt(const Value& v, const CallArgs& a) { return compare(v, bind_args("lt", a, {"other"})[0]) < 0; }
bool t_le(const Value& v, const CallArgs& a) { return compare(v, bind_args("le", a, {"other"})[0]) <= 0; }
bool t_gt(const Value& v, const CallArgs& a) { return compare(v, bind_args("gt", a, {"other"})[0]) > 0; }
bool t_ge(const Value& v, const CallArgs& a) { return compare(v, bind_args("ge", a, {"other"})[0]) >= 0; }

template <typename Fn>
struct Named {
  std::string_view name;
  Fn fn;
};

const Named<FilterFn> kFilters[] = {
    {"abs", f_abs},           {"attr", f_attr},         {"capitalize", f_capitalize},
    {"count", f_length},      {"d", f_default},         {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},
    {"first", f_first},       {"float", f_float},       {"format", f_format},
    {"indent", f_indent},     {"int", f_int},           {"items", f_items},
    {"join", f_join},         {"last", f_last},         {"length", f_length},
    {"list", f_list},         {"lower", f_lower},       {"map", f_map},
    {"max", f_max},           {"min", f_min},           {"reject", f_reject},
    {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},
    {"round", f_round},       {"safe", f_safe},         {"select", f_select},
    {"selectattr", f_selectattr}, {"sort", f_sort},     {"string", f_string},
    {"sum", f_sum},           {"title", f_title},       {"tojson", f_tojson},
    {"trim", f_trim},         {"unique", f_unique},     {"upper", f_upper},
    {"wordcount", f_wordcount},
};

const Named<TestFn> kTests[] = {
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined},
    {"divisibleby", t_divisibleby}, {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq},
    {"even", t_even}, {"false", t_false}, {"filter", t_filter}, {"float", t_float},
    {"ge", t_ge}, {">=", t_ge}, {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt},
    {"in", t_in}, {"integer", t_integer}, {"iterable", t_iterable}, {"le", t_le},
    {"<=", t_le}, {"lower", t_lower}, {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt},
    {"mapping", t_mapping}, {"ne", t_ne}, {"!=", t_ne}, {"none", t_none},
    {"number", t_number}, {"odd", t_odd}, {"sameas", t_sameas}, {"sequence", t_sequence},
    {"string", t_string}, {"test", t_test}, {"true", t_true}, {"undefined", t_undefined},
    {"upper", t_upper},
};

// ---- globals

Value g_range(CallArgs& a) {
  if (!a.keyword.empty()) fail_eval("range() takes no keyword arguments");
  const auto& p = a.positional;
  if (p.empty() || p.size() > 3) fail_eval("range expected 1 to 3 arguments, got {}", p.size());
  const int64_t start = p.size() == 1 ? 0 : need_int(p[0], "range argument");
  const int64_t stop = need_int(p.size() == 1 ? p[0] : p[1], "range argument");
  const int64_t step = p.size() == 3 ? need_int(p[2], "range argument") : 1;
  if (step == 0) fail_eval("range() arg 3 must not be zero");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    if (out.size() >= 100000) fail_eval("range too big, the sandbox allows 100000 items");
    out.emplace_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;  // the next item would be past int64, so past stop
  }
  spend_steps(int64_t(out.size()));
  return Value::list(std::move(out));
}

// dict(**kw) and namespace(**kw): also accept one mapping positionally.
Value make_mapping(CallArgs& a, Dict::Kind kind, const char* name) {
  Value d = Value::dict(kind);
  if (a.positional.size() > 1) fail_eval("{}() takes at most one positional argument", name);
  if (!a.positional.empty()) {
    if (!a.positional[0].is_mapping()) fail_eval("{}() argument must be a mapping, not {}", name, type_name(a.positional[0]));
    d.as_dict().items = a.positional[0].as_dict().items;
  }
  for (auto& [k, v] : a.keyword) d.as_dict().set(k, v);
  return d;
}

Value g_raise_exception(CallArgs& a) {
  const auto p = bind_args("raise_exception", a, {"message"});
  throw tf::Error(to_str(p[0]));
}

Value g_strftime_now(CallArgs& a) {
  const auto p = bind_args("strftime_now", a, {"format"});
  if (!p[0].is_string()) fail_eval("strftime_now: the format must be a string");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  if (p[0].as_string().empty()) return Value("");
  std::string buf(256, '\0');
  size_t n = 0;
  while ((n = std::strftime(buf.data(), buf.size(), p[0].as_string().c_str(), &local)) == 0 && buf.size() < 65536)
    buf.resize(buf.size() * 2);
  buf.resize(n);
  return Value(std::move(buf));
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& f : kFilters)
    if (f.name == name) return f.fn;
  return nullptr;
}

TestFn find_test(std::string_view name) {
  for (const auto& t : kTests)
    if (t.name == name) return t.fn;
  return nullptr;
}

void add_globals(Dict& scope, std::vector<Value>& namespaces) {
  scope.set("range", Value::function("range", g_range));
  scope.set("dict", Value::function("dict", [](CallArgs& a) { return make_mapping(a, Dict::Kind::Dict, "dict"); }));
  scope.set("namespace", Value::function("namespace", [&namespaces](CallArgs& a) {
              Value ns = make_mapping(a, Dict::Kind::Namespace, "namespace");
              namespaces.push_back(ns);
              return ns;
            }));
  scope.set("raise_exception", Value::function("raise_exception", g_raise_exception));
  scope.set("strftime_now", Value::function("strftime_now", g_strftime_now));
}

}  // namespace tf::jinja
