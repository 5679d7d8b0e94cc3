#include "chat/jinja_json.h"

#include <algorithm>
#include <cmath>

namespace tf::jinja {

namespace {

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7e)) {
          if (c > 0xffff) {  // a surrogate pair, as Python writes it
            const char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
          } else {
            out += fmt::format("\\u{:04x}", uint32_t(c));
          }
        } else {
          out += utf8_encode(std::u32string(1, c));
        }
    }
  }
  out += '"';
}

struct Dumper {
  const DumpOptions& opts;
  std::string item_sep;
  std::string key_sep;
  std::string out;

  // Before an item (or a closing bracket at `depth`) when indenting: a newline and the indent.
  void newline(int depth) {
    if (!opts.indent) return;
    out += '\n';
    for (int i = 0; i < depth; ++i) out += *opts.indent;
  }

  void dump(const Value& v, int depth) {
    if (depth > kMaxValueDepth) fail_eval("value nested more than {} levels deep", kMaxValueDepth);
    check_string_size(out.size());  // a value sharing sub-values can print exponentially long
    switch (v.kind()) {
      case Kind::None: out += "null"; return;
      case Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
      case Kind::Int: out += std::to_string(v.as_int()); return;
      case Kind::Float: {
        const double d = v.as_double();
        if (std::isnan(d)) out += "NaN";
        else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
        else out += float_repr(d);
        return;
      }
      case Kind::String: dump_string(out, v.as_string(), opts.ensure_ascii); return;
      case Kind::List: {
        const auto& items = v.as_list().items;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          newline(depth + 1);
          dump(items[i], depth + 1);
        }
        newline(depth);
        out += ']';
        return;
      }
      case Kind::Dict: {
        const Dict& d = v.as_dict();
        if (d.kind != Dict::Kind::Dict) break;
        if (d.items.empty()) {
          out += "{}";
          return;
        }
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& kv : d.items) items.push_back(&kv);
        if (opts.sort_keys)
          std::stable_sort(items.begin(), items.end(),
                           [](auto* a, auto* b) { return a->first < b->first; });
        out += '{';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_sep;
          newline(depth + 1);
          dump_string(out, items[i]->first, opts.ensure_ascii);
          out += key_sep;
          dump(items[i]->second, depth + 1);
        }
        newline(depth);
        out += '}';
        return;
      }
      default: break;
    }
    fail_eval("Object of type {} is not JSON serializable", type_name(v));
  }
};

}  // namespace

std::string dumps(const Value& v, const DumpOptions& opts) {
  Dumper d{opts, opts.item_separator.value_or(opts.indent ? "," : ", "),
           opts.key_separator.value_or(": "), {}};
  d.dump(v, 0);
  return std::move(d.out);
}

}  // namespace tf::jinja
