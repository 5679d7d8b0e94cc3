#include "sample/json_schema.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <set>

#include "core/error.h"
#include "core/json_bounded.h"

namespace tf {

namespace {

using json = nlohmann::ordered_json;  // properties keep the schema's order

// The keywords the compiler reads, and those that change nothing the output must satisfy
// (annotations, and the places $ref points into); any other is refused.
const std::set<std::string> kStructural = {"type",     "properties", "required", "additionalProperties",
                                           "items",    "minItems",   "maxItems", "enum",
                                           "const",    "anyOf",      "oneOf",    "allOf",
                                           "$ref",     "minLength",  "maxLength", "minimum",
                                           "maximum",  "exclusiveMinimum", "exclusiveMaximum", "pattern",
                                           "format"};
// Bounds of a string's length or an integer's value: they narrow a typed value, so they are
// refused beside enum, const and anyOf, which would leave them unapplied.
const char* const kBounds[] = {"minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                               "pattern",   "format"};
const std::set<std::string> kAnnotations = {"title",   "description", "default",    "examples",  "$schema", "$id",
                                            "$comment", "deprecated", "readOnly",  "writeOnly", "$defs",   "definitions"};

// A machine frame counts a literal's bytes and a range of literals in 16 bits.
constexpr size_t kMaxLiterals = 65535, kMaxLiteralBytes = 65535;
constexpr int64_t kMaxLength = 65535;  // a string's minLength / maxLength (SchemaMachine counts in 16 bits)

// RFC 6901: "~1" is '/', "~0" is '~'.
std::string unescape_pointer(std::string s) {
  for (size_t i = 0; (i = s.find('~', i)) != std::string::npos; ++i)
    if (i + 1 < s.size() && (s[i + 1] == '0' || s[i + 1] == '1')) s.replace(i, 2, s[i + 1] == '0' ? "~" : "/");
  return s;
}

class Compiler {
 public:
  Compiler(const json& root, std::string what) : root_(root), what_(std::move(what)) {}

  // The node of schema s at JSON pointer `path` (relative to the root, "" for the root).
  int32_t node(const json& s, const std::string& path) {
    struct Nest {  // schemas inside schemas, $ref targets counted: the recursion here is that deep
      int& d;
      explicit Nest(int& depth) : d(depth) { ++d; }
      ~Nest() { --d; }
    } nest(depth_);
    if (depth_ > kMaxNesting) refuse(path, "", "nests deeper than " + std::to_string(kMaxNesting) + " schemas ($ref targets counted)");
    if (s.is_boolean())
      refuse(path, "", s.get<bool>() ? "'true' (any value) cannot be held to a shape" : "'false' allows no value");
    if (!s.is_object()) refuse(path, "", "a schema must be an object");
    for (const auto& [key, value] : s.items())
      if (!kStructural.contains(key) && !kAnnotations.contains(key))
        refuse(path, key, "is not supported (the output could not be held to it)");
    if (const auto it = s.find("$ref"); it != s.end()) {
      for (const auto& [key, value] : s.items())
        if (key != "$ref" && !kAnnotations.contains(key)) refuse(path, key, "beside '$ref' is not supported");
      return ref(*it, path + "/$ref");
    }
    if (const auto it = s.find("allOf"); it != s.end()) {  // as pydantic v1 wraps a described $ref
      if (!it->is_array() || it->size() != 1) refuse(path, "allOf", "must hold exactly one schema (several are not supported)");
      for (const auto& [key, value] : s.items())
        if (key != "allOf" && !kAnnotations.contains(key)) refuse(path, key, "beside 'allOf' is not supported");
      return node((*it)[0], path + "/allOf/0");
    }
    for (const char* key : {"const", "enum", "anyOf", "oneOf"})
      if (s.contains(key))
        for (const char* bound : kBounds)
          if (s.contains(bound)) refuse(path, bound, std::string("beside '") + key + "' is not supported");
    if (const auto it = s.find("const"); it != s.end()) return literals({it->dump()}, path, "const");
    if (const auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) refuse(path, "enum", "must be a non-empty array");
      std::vector<std::string> texts;
      for (const json& v : *it) texts.push_back(v.dump());
      return literals(std::move(texts), path, "enum");
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      const auto it = s.find(key);
      if (it == s.end()) continue;
      if (!it->is_array() || it->empty()) refuse(path, key, "must be a non-empty array");
      if (s.contains("type") || s.contains(key == std::string("anyOf") ? "oneOf" : "anyOf"))
        refuse(path, key, "beside 'type' or another of 'anyOf' / 'oneOf' is not supported");
      SchemaNode any{.kind = SchemaNode::Kind::AnyOf};
      for (size_t i = 0; i < it->size(); ++i) any.alts.push_back(node((*it)[i], path + "/" + key + "/" + std::to_string(i)));
      return add(std::move(any));
    }
    const auto type = s.find("type");
    if (type == s.end()) {
      if (s.contains("properties")) return typed(s, "object", path);
      refuse(path, "", "has no 'type', 'enum', 'const', 'anyOf' or '$ref': it allows any value, which cannot be held "
                       "to a shape");
    }
    if (type->is_string()) return typed(s, type->get<std::string>(), path);
    if (!type->is_array() || type->empty()) refuse(path, "type", "must be a string or a non-empty array of strings");
    SchemaNode any{.kind = SchemaNode::Kind::AnyOf};
    for (const json& t : *type) {
      if (!t.is_string()) refuse(path, "type", "must be a string or a non-empty array of strings");
      any.alts.push_back(typed(s, t.get<std::string>(), path));
    }
    return add(std::move(any));
  }

  // Checks what compiling cannot: no chain of references or alternatives that leads back to
  // itself before a value starts (the machine would expand it forever), and an object root.
  void check(int32_t root) {
    std::vector<int> mark(out.nodes.size(), 0);  // 0 unseen, 1 on the path, 2 done
    std::function<void(int32_t)> visit = [&](int32_t n) {
      if (mark[size_t(n)] == 2) return;
      if (mark[size_t(n)] == 1) refuse("", "$ref", "leads back to itself before any value starts");
      mark[size_t(n)] = 1;
      for (int32_t a : out.nodes[size_t(n)].alts) visit(a);
      mark[size_t(n)] = 2;
    };
    for (int32_t n = 0; n < int32_t(out.nodes.size()); ++n) visit(n);
    std::function<void(int32_t)> object_root = [&](int32_t n) {
      const SchemaNode& s = out.nodes[size_t(n)];
      if (s.kind == SchemaNode::Kind::AnyOf) {
        for (int32_t a : s.alts) object_root(a);
      } else if (s.kind != SchemaNode::Kind::Object) {
        refuse("", "type", "of the root must be \"object\"");
      }
    };
    object_root(root);
  }

  JsonSchema out;

 private:
  int32_t add(SchemaNode n) {
    out.nodes.push_back(std::move(n));
    return int32_t(out.nodes.size() - 1);
  }

  int32_t literals(std::vector<std::string> texts, const std::string& path = "", const char* key = "") {
    if (texts.size() > kMaxLiterals) refuse(path, key, "has more than " + std::to_string(kMaxLiterals) + " values");
    for (const std::string& t : texts)
      if (t.size() > kMaxLiteralBytes)
        refuse(path, key, "holds a value longer than " + std::to_string(kMaxLiteralBytes) + " bytes as JSON");
    std::sort(texts.begin(), texts.end());
    texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
    return add(SchemaNode{.kind = SchemaNode::Kind::Literal, .literals = std::move(texts)});
  }

  // A reference is a one-alternative AnyOf, made before its target is compiled, so that a
  // recursive schema refers back to it.
  int32_t ref(const json& r, const std::string& path) {
    if (!r.is_string()) refuse(path, "", "must be a string");
    const std::string target = r.get<std::string>();
    if (const auto it = refs_.find(target); it != refs_.end()) return it->second;
    const json* s = nullptr;
    std::string at;
    if (target == "#") {
      s = &root_;
    } else {
      for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
        const std::string p = prefix;
        if (target.rfind(p, 0) != 0) continue;
        const std::string section = p.substr(2, p.size() - 3), name = unescape_pointer(target.substr(p.size()));
        const auto sec = root_.find(section);
        if (sec != root_.end() && sec->is_object() && sec->contains(name)) {
          s = &(*sec)[name];
          at = "/" + section + "/" + target.substr(p.size());
        }
      }
    }
    if (s == nullptr)
      refuse(path, "", "'" + target + "' is not '#' or a schema under '#/$defs/' or '#/definitions/' of this document");
    const int32_t idx = add(SchemaNode{.kind = SchemaNode::Kind::AnyOf});
    refs_[target] = idx;
    const int32_t n = node(*s, at);
    out.nodes[size_t(idx)].alts = {n};
    return idx;
  }

  int64_t count(const json& s, const char* key, const std::string& path, int64_t absent, int64_t max = 100000) {
    const auto it = s.find(key);
    if (it == s.end()) return absent;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > max)
      refuse(path, key, "must be an integer from 0 to " + std::to_string(max));
    return it->get<int64_t>();
  }

  // Narrows v (an integer's lowest or highest value) by the bound `key` if s has it: the
  // integers at or above (lower) or at or below a number, or strictly so (exclusive).
  void bound(const json& s, const char* key, const std::string& path, bool lower, bool exclusive, int64_t& v) {
    const auto it = s.find(key);
    if (it == s.end()) return;
    if (!it->is_number()) refuse(path, key, "must be a number");
    int64_t b = 0;
    if (it->is_number_integer()) {
      if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX))
        refuse(path, key, "is beyond the 64-bit integers");
      b = it->get<int64_t>();
      if (exclusive) {
        if (b == (lower ? INT64_MAX : INT64_MIN)) refuse(path, key, "leaves no 64-bit integer");
        b += lower ? 1 : -1;
      }
    } else {
      const double d = it->get<double>();
      if (!(d > -9.2e18 && d < 9.2e18)) refuse(path, key, "is beyond the 64-bit integers");
      const double r = lower ? std::ceil(d) : std::floor(d);  // exclusive and not whole: the same
      b = int64_t(r);
      if (exclusive && r == d) b += lower ? 1 : -1;
    }
    v = lower ? std::max(v, b) : std::min(v, b);
  }

  int32_t typed(const json& s, const std::string& type, const std::string& path) {
    using K = SchemaNode::Kind;
    if (type == "string") {
      SchemaNode n{.kind = K::String};
      n.min_items = int32_t(count(s, "minLength", path, 0, kMaxLength));
      n.max_items = int32_t(count(s, "maxLength", path, -1, kMaxLength));
      if (n.max_items >= 0 && n.max_items < n.min_items) refuse(path, "maxLength", "is below 'minLength'");
      const auto pattern = s.find("pattern"), format = s.find("format");
      if (pattern == s.end() && format == s.end()) return add(std::move(n));
      const char* key = pattern != s.end() ? "pattern" : "format";
      for (const char* other : {"format", "minLength", "maxLength"})
        if (other != std::string(key) && s.contains(other))
          refuse(path, other, std::string("beside '") + key + "' is not supported");
      const json& v = pattern != s.end() ? *pattern : *format;
      if (!v.is_string()) refuse(path, key, "must be a string");
      std::string re = v.get<std::string>();
      if (format != s.end()) {
        re = format_pattern(re);
        if (re.empty())
          refuse(path, "format", v.dump() + " is not supported (date, time, date-time, uuid, email and ipv4 are)");
      }
      n.min_items = 0, n.max_items = -1;
      n.regex = int32_t(out.regexes.size());
      out.regexes.push_back(compile_regex(re, what_ + ": '" + key + "' at " + (path.empty() ? "the root" : "'#" + path + "'")));
      return add(std::move(n));
    }
    if (type == "number") {
      for (const char* bound : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
        if (s.contains(bound)) refuse(path, bound, "of a \"number\" is not supported (of an \"integer\" it is)");
      return add(SchemaNode{.kind = K::Number});
    }
    if (type == "integer") {
      SchemaNode n{.kind = K::Integer};
      bound(s, "minimum", path, /*lower=*/true, /*exclusive=*/false, n.min_value);
      bound(s, "exclusiveMinimum", path, true, true, n.min_value);
      bound(s, "maximum", path, false, false, n.max_value);
      bound(s, "exclusiveMaximum", path, false, true, n.max_value);
      if (n.max_value < n.min_value) refuse(path, "maximum", "leaves no integer above the minimum");
      return add(std::move(n));
    }
    if (type == "null") return literals({"null"});
    if (type == "boolean") return literals({"false", "true"});
    if (type == "array") {
      SchemaNode a{.kind = K::Array};
      a.min_items = int32_t(count(s, "minItems", path, 0));
      a.max_items = int32_t(count(s, "maxItems", path, -1));
      if (a.max_items >= 0 && a.max_items < a.min_items) refuse(path, "maxItems", "is below 'minItems'");
      const auto items = s.find("items");
      if (items != s.end() && !(items->is_boolean() && !items->get<bool>())) {
        if (items->is_boolean()) refuse(path, "items", "'true' (items of any value) cannot be held to a shape");
        a.items = node(*items, path + "/items");
      } else if (a.min_items > 0) {
        refuse(path, "minItems", "needs 'items' (without them only an empty array can be written)");
      }
      return add(std::move(a));
    }
    if (type == "object") {
      SchemaNode o{.kind = K::Object};
      std::set<std::string> names;
      if (const auto props = s.find("properties"); props != s.end()) {
        if (!props->is_object()) refuse(path, "properties", "must be an object");
        for (const auto& [name, sub] : props->items()) {
          names.insert(name);
          o.props.emplace_back(json(name).dump(), node(sub, path + "/properties/" + name));
          if (o.props.back().first.size() > kMaxLiteralBytes)
            refuse(path, "properties", "has a name longer than " + std::to_string(kMaxLiteralBytes) + " bytes as JSON");
        }
      }
      if (o.props.size() > kMaxLiterals)
        refuse(path, "properties", "has more than " + std::to_string(kMaxLiterals) + " names");
      std::set<std::string> required;
      if (const auto req = s.find("required"); req != s.end()) {
        if (!req->is_array()) refuse(path, "required", "must be an array of strings");
        for (const json& r : *req) {
          if (!r.is_string() || !names.contains(r.get<std::string>()))
            refuse(path, "required", "names " + r.dump() + ", which is not in 'properties'");
          required.insert(json(r.get<std::string>()).dump());
        }
      }
      const int32_t n = int32_t(o.props.size());
      o.next_required.assign(size_t(n) + 1, n);
      for (int32_t i = n - 1; i >= 0; --i)
        o.next_required[size_t(i)] = required.contains(o.props[size_t(i)].first) ? i : o.next_required[size_t(i) + 1];
      o.key_order.resize(size_t(n));
      for (int32_t i = 0; i < n; ++i) o.key_order[size_t(i)] = i;
      std::stable_sort(o.key_order.begin(), o.key_order.end(),
                       [&](int32_t a, int32_t b) { return o.props[size_t(a)].first < o.props[size_t(b)].first; });
      return add(std::move(o));
    }
    refuse(path, "type", "'" + type + "' is not a JSON Schema type");
  }

  [[noreturn]] void refuse(const std::string& path, const std::string& key, const std::string& why) const {
    const std::string at = path.empty() ? "the root" : "'#" + path + "'";
    if (key.empty()) fail("{}: the schema at {} {}", what_, at, why);
    fail("{}: '{}' at {} {}", what_, key, at, why);
  }

  static constexpr int kMaxNesting = 256;
  const json& root_;
  std::string what_;
  std::map<std::string, int32_t> refs_;
  int depth_ = 0;
};

}  // namespace

JsonSchema compile_json_schema(std::string_view text, const std::string& what) {
  const json root = parse_json_bounded<json>(text, what);
  Compiler c(root, what);
  const int32_t r = c.node(root, "");
  c.check(r);
  c.out.root = r;
  return std::move(c.out);
}

JsonSchema wrap_json_schema(JsonSchema s, const std::string& before, const std::string& after,
                            const std::string& between) {
  if (before.empty() && after.empty() && between.empty()) return s;
  TF_ASSERT(!after.empty(), "a wrapped schema needs a text after its value");
  if (before.size() > kMaxLiteralBytes || after.size() > kMaxLiteralBytes || between.size() > kMaxLiteralBytes)
    fail("the texts around a JSON value may have at most {} bytes each, got {}, {} and {}", kMaxLiteralBytes,
         before.size(), after.size(), between.size());
  std::vector<std::string> texts{before, after};
  if (!between.empty()) texts.push_back(between);
  s.nodes.push_back(SchemaNode{.kind = SchemaNode::Kind::Wrap, .items = s.root, .literals = std::move(texts)});
  s.root = int32_t(s.nodes.size() - 1);
  return s;
}

}  // namespace tf
