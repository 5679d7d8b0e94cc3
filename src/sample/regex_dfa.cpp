#include "sample/regex_dfa.h"

#include <algorithm>
#include <bitset>
#include <cctype>
#include <map>
#include <memory>

#include "core/error.h"

namespace tf {

namespace {

using ByteSet = std::bitset<256>;

// The bytes the text may hold: inside a JSON string, not '"', '\\' or a control byte; as a
// whole text, any but NUL.
ByteSet writable(RegexUse use) {
  ByteSet s;
  for (int b = use == RegexUse::Text ? 1 : 0x20; b < 256; ++b) s.set(size_t(b));
  if (use == RegexUse::JsonString) {
    s.reset('"');
    s.reset('\\');
  }
  return s;
}

// The pattern as a tree. A character class is its ASCII members plus, when `non_ascii`, every
// non-ASCII character (matched as UTF-8 bytes).
struct Node {
  enum class Kind { Set, Concat, Alt, Repeat };
  Kind kind = Kind::Concat;
  ByteSet set;
  bool non_ascii = false;
  std::vector<std::unique_ptr<Node>> kids;
  int min = 0, max = -1;  // Repeat: max -1 is unbounded
};
using NodePtr = std::unique_ptr<Node>;

NodePtr make(Node::Kind k) {
  auto n = std::make_unique<Node>();
  n->kind = k;
  return n;
}

// The ASCII bytes.
ByteSet ascii() {
  ByteSet s;
  for (int b = 0; b < 128; ++b) s.set(size_t(b));
  return s;
}

// A class's complement: the ASCII bytes it lacks, and the non-ASCII characters unless it had them.
void complement(Node& n) {
  n.set = ascii() & ~n.set;
  n.non_ascii = !n.non_ascii;
}

NodePtr byte_node(uint8_t b) {
  NodePtr n = make(Node::Kind::Set);
  n->set.set(b);
  return n;
}

class Parser {
 public:
  Parser(std::string_view p, const std::string& what, bool whole) : p_(p), what_(what), whole_(whole) {}

  NodePtr parse() {
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_[0] == '^') anchored_start = true, ++i_;
    NodePtr body = alternation();
    if (i_ < p_.size() && p_[i_] == '$') anchored_end = true, ++i_;
    if (i_ < p_.size()) fail_at(p_[i_] == ')' ? "an unmatched ')'" : "'^' or '$' inside the pattern (only at its ends)");
    NodePtr out = make(Node::Kind::Concat);
    if (!anchored_start && !whole_) out->kids.push_back(any_text());
    out->kids.push_back(std::move(body));
    if (!anchored_end && !whole_) out->kids.push_back(any_text());
    return out;
  }

 private:
  [[noreturn]] void fail_at(const std::string& why) const {
    fail("{}: {} at offset {} of the pattern", what_, why, i_);
  }
  bool more() const { return i_ < p_.size(); }
  char peek() const { return p_[i_]; }

  static NodePtr any_char() {
    NodePtr n = make(Node::Kind::Set);
    n->set = ascii();
    n->non_ascii = true;
    return n;
  }
  static NodePtr any_text() {
    NodePtr r = make(Node::Kind::Repeat);
    r->kids.push_back(any_char());
    return r;
  }

  NodePtr alternation() {
    NodePtr first = concatenation();
    if (!more() || peek() != '|') return first;
    NodePtr alt = make(Node::Kind::Alt);
    alt->kids.push_back(std::move(first));
    while (more() && peek() == '|') {
      ++i_;
      alt->kids.push_back(concatenation());
    }
    return alt;
  }

  NodePtr concatenation() {
    NodePtr c = make(Node::Kind::Concat);
    while (more() && peek() != '|' && peek() != ')') {
      if (peek() == '$' && i_ + 1 == p_.size()) break;  // the end anchor
      c->kids.push_back(repetition());
    }
    return c;
  }

  int number() {
    size_t start = i_;
    int v = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) fail_at("a repetition count above " + std::to_string(kMaxRepeat));
      ++i_;
    }
    if (i_ == start) fail_at("a '{' without a count");
    return v;
  }

  NodePtr repetition() {
    NodePtr a = atom();
    while (more()) {
      int lo, hi;
      const char c = peek();
      if (c == '*') {
        lo = 0, hi = -1, ++i_;
      } else if (c == '+') {
        lo = 1, hi = -1, ++i_;
      } else if (c == '?') {
        lo = 0, hi = 1, ++i_;
      } else if (c == '{') {
        ++i_;
        lo = hi = number();
        if (more() && peek() == ',') {
          ++i_;
          hi = more() && peek() == '}' ? -1 : number();
        }
        if (!more() || peek() != '}') fail_at("a '{' without its '}'");
        ++i_;
        if (hi >= 0 && hi < lo) fail_at("a repetition {n,m} with m below n");
      } else {
        break;
      }
      if (more() && peek() == '?') ++i_;  // lazy: the same set of matches
      NodePtr r = make(Node::Kind::Repeat);
      r->min = lo, r->max = hi;
      r->kids.push_back(std::move(a));
      a = std::move(r);
    }
    return a;
  }

  // A hex number of n digits at i_.
  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k, ++i_) {
      if (!more() || !std::isxdigit(uint8_t(peek()))) fail_at("an escape without its hex digits");
      const char c = peek();
      v = v * 16 + uint32_t(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
  }

  // The escape after '\' (i_ at the letter): a class (\d, \w, ...) or one code point.
  NodePtr escape(bool in_class, uint32_t* code_point) {
    const char c = peek();
    ++i_;
    auto cls = [&](const char* ranges, bool negate) {
      NodePtr n = make(Node::Kind::Set);
      for (const char* r = ranges; *r; r += 2)
        for (int b = uint8_t(r[0]); b <= uint8_t(r[1]); ++b) n->set.set(size_t(b));
      if (negate) complement(*n);
      return n;
    };
    switch (c) {
      case 'd': return cls("09", false);
      case 'D': return cls("09", true);
      case 'w': return cls("azAZ09__", false);
      case 'W': return cls("azAZ09__", true);
      case 's': return cls("  \t\r\f\f\v\v", false);
      case 'S': return cls("  \t\r\f\f\v\v", true);
      case 'n': *code_point = '\n'; return nullptr;
      case 't': *code_point = '\t'; return nullptr;
      case 'r': *code_point = '\r'; return nullptr;
      case 'f': *code_point = '\f'; return nullptr;
      case 'v': *code_point = '\v'; return nullptr;
      case '0': *code_point = 0; return nullptr;
      case 'x': *code_point = hex(2); break;
      case 'u': *code_point = hex(4); break;
      default:
        if (std::isalnum(uint8_t(c))) {
          --i_;
          fail_at(std::string("the escape \\") + c + " (back references, \\b, \\p{...} and the like are not supported)");
        }
        *code_point = uint8_t(c);
        return nullptr;
    }
    if (*code_point >= 0xd800 && *code_point < 0xe000) fail_at("a surrogate escape");
    if (in_class && *code_point >= 0x80) fail_at("a non-ASCII member of a character class");
    return nullptr;
  }

  // One code point (from its UTF-8 bytes in the pattern, or an escape's value) as a node.
  static NodePtr code_point_node(uint32_t cp) {
    if (cp < 0x80) return byte_node(uint8_t(cp));
    std::string u;
    if (cp < 0x800) {
      u = {char(0xc0 | cp >> 6), char(0x80 | (cp & 0x3f))};
    } else {
      u = {char(0xe0 | cp >> 12), char(0x80 | (cp >> 6 & 0x3f)), char(0x80 | (cp & 0x3f))};
    }
    NodePtr c = make(Node::Kind::Concat);
    for (char b : u) c->kids.push_back(byte_node(uint8_t(b)));
    return c;
  }

  NodePtr char_class() {
    ++i_;  // '['
    NodePtr n = make(Node::Kind::Set);
    bool negate = false;
    if (more() && peek() == '^') negate = true, ++i_;
    while (more() && peek() != ']') {  // "[]" is empty and "[^]" any character, as in ECMA-262
      uint32_t lo;
      if (peek() == '\\') {
        ++i_;
        if (!more()) fail_at("a '\\' at the end");
        NodePtr sub = escape(/*in_class=*/true, &lo);
        if (sub) {
          n->set |= sub->set;
          n->non_ascii = n->non_ascii || sub->non_ascii;
          continue;
        }
      } else {
        if (uint8_t(peek()) >= 0x80) fail_at("a non-ASCII member of a character class");
        lo = uint8_t(peek());
        ++i_;
      }
      uint32_t hi = lo;
      if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        if (peek() == '\\') {
          ++i_;
          if (!more() || escape(true, &hi) != nullptr) fail_at("a range that ends in a class");
        } else {
          if (uint8_t(peek()) >= 0x80) fail_at("a non-ASCII member of a character class");
          hi = uint8_t(peek());
          ++i_;
        }
        if (hi < lo) fail_at("a range whose end comes before its start");
      }
      for (uint32_t b = lo; b <= hi; ++b) n->set.set(b);
    }
    if (!more()) fail_at("a '[' without its ']'");
    ++i_;  // ']'
    if (negate) complement(*n);
    return n;
  }

  NodePtr atom() {
    const char c = peek();
    if (c == '(') {
      ++i_;
      if (more() && peek() == '?') {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
          i_ += 2;
        } else if (i_ + 2 < p_.size() && p_[i_ + 1] == '<' && p_[i_ + 2] != '=' && p_[i_ + 2] != '!') {
          while (more() && peek() != '>') ++i_;  // a named group: the name is not kept
          if (!more()) fail_at("a group name without its '>'");
          ++i_;
        } else {
          fail_at("a lookaround group (?=, ?!, ?<=, ?<!)");
        }
      }
      NodePtr inner = alternation();
      if (!more() || peek() != ')') fail_at("a '(' without its ')'");
      ++i_;
      return inner;
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++i_;
      NodePtr n = any_char();
      n->set.reset('\n');
      n->set.reset('\r');
      return n;
    }
    if (c == '\\') {
      ++i_;
      if (!more()) fail_at("a '\\' at the end");
      uint32_t cp = 0;
      NodePtr cls = escape(/*in_class=*/false, &cp);
      return cls ? std::move(cls) : code_point_node(cp);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') fail_at(std::string("a '") + c + "' with nothing to repeat");
    if (c == '^' || c == '$') fail_at("'^' or '$' inside the pattern (only at its ends)");
    // A literal: one UTF-8 sequence as it is.
    const uint8_t b = uint8_t(c);
    const size_t len = b < 0x80 ? 1 : b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
    if (i_ + len > p_.size()) fail_at("a cut UTF-8 sequence");
    NodePtr seq = make(Node::Kind::Concat);
    for (size_t k = 0; k < len; ++k) seq->kids.push_back(byte_node(uint8_t(p_[i_ + k])));
    i_ += len;
    return len == 1 ? std::move(seq->kids[0]) : std::move(seq);
  }

  static constexpr int kMaxRepeat = 1000;
  std::string_view p_;
  const std::string& what_;
  bool whole_;  // the whole text must match: anchored at both ends
  size_t i_ = 0;
};

// Thompson's construction: states with byte-set edges and empty edges.
class Nfa {
 public:
  explicit Nfa(const std::string& what) : what_(what) {}
  struct State {
    std::vector<std::pair<ByteSet, int>> edges;
    std::vector<int> empty;
  };
  std::vector<State> states;

  int add() {
    if (int(states.size()) >= RegexDfa::kMaxNfaStates)
      fail("{}: the pattern's automaton would pass {} states", what_, RegexDfa::kMaxNfaStates);
    states.emplace_back();
    return int(states.size()) - 1;
  }
  void edge(int from, const ByteSet& on, int to) { states[size_t(from)].edges.emplace_back(on, to); }
  void empty(int from, int to) { states[size_t(from)].empty.push_back(to); }

  // The fragment of n, from state `in`; returns its end state.
  int build(const Node& n, int in) {
    switch (n.kind) {
      case Node::Kind::Set: {
        const int out = add();
        if (n.set.any()) edge(in, n.set, out);
        if (n.non_ascii) non_ascii(in, out);
        return out;
      }
      case Node::Kind::Concat: {
        int at = in;
        for (const auto& k : n.kids) at = build(*k, at);
        return at;
      }
      case Node::Kind::Alt: {
        const int out = add();
        for (const auto& k : n.kids) {
          const int s = add();
          empty(in, s);
          empty(build(*k, s), out);
        }
        return out;
      }
      case Node::Kind::Repeat: {
        int at = in;
        for (int r = 0; r < n.min; ++r) at = build(*n.kids[0], at);
        const int out = add();
        empty(at, out);
        if (n.max < 0) {  // a loop: out -> body -> out
          const int s = add();
          empty(out, s);
          empty(build(*n.kids[0], s), out);
          return out;
        }
        for (int r = n.min; r < n.max; ++r) {  // optional copies, each may be skipped to the end
          at = build(*n.kids[0], at);
          empty(at, out);
        }
        return out;
      }
    }
    return in;
  }

 private:
  // Any non-ASCII character from `in` to `out` as UTF-8 byte ranges (JsonString checks the
  // finer rules: overlong forms, surrogates, the end of Unicode).
  void non_ascii(int in, int out) {
    ByteSet cont;
    for (int b = 0x80; b < 0xc0; ++b) cont.set(size_t(b));
    auto range = [](int lo, int hi) {
      ByteSet s;
      for (int b = lo; b <= hi; ++b) s.set(size_t(b));
      return s;
    };
    const int c1 = add(), c2 = add(), c3 = add();
    edge(in, range(0xc2, 0xdf), c1);
    edge(in, range(0xe0, 0xef), c2);
    edge(in, range(0xf0, 0xf4), c3);
    edge(c3, cont, c2);
    edge(c2, cont, c1);
    edge(c1, cont, out);
  }

  const std::string& what_;
};

}  // namespace

// Steps of building before a pattern is refused: about 0.06 s on this VM.
constexpr int64_t kMaxWork = 25'000'000;

RegexDfa compile_regex(std::string_view pattern, const std::string& what, RegexUse use) {
  const NodePtr tree = Parser(pattern, what, use == RegexUse::Text).parse();
  Nfa nfa(what);
  const int start = nfa.add();
  const int accept = nfa.build(*tree, start);

  auto closure = [&](std::vector<int> set) {
    std::vector<char> seen(nfa.states.size(), 0);
    for (int s : set) seen[size_t(s)] = 1;
    for (size_t i = 0; i < set.size(); ++i)
      for (int t : nfa.states[size_t(set[i])].empty)
        if (!seen[size_t(t)]) seen[size_t(t)] = 1, set.push_back(t);
    std::sort(set.begin(), set.end());
    return set;
  };
  const ByteSet ok = writable(use);
  std::map<std::vector<int>, int> ids;
  std::vector<std::vector<int>> sets{closure({start})};
  ids[sets[0]] = 0;
  std::vector<std::vector<int32_t>> next;  // per DFA state and byte: the next state, -1 none
  int64_t work = 0;  // byte tests and closure steps: the bound keeps a hostile pattern cheap to refuse
  for (size_t d = 0; d < sets.size(); ++d) {
    std::vector<std::vector<int>> by_byte(256);
    for (int s : sets[d])
      for (const auto& [on, to] : nfa.states[size_t(s)].edges) {
        if ((work += 256) > kMaxWork) fail("{}: the pattern's automaton takes too long to build", what);
        const ByteSet live = on & ok;
        for (size_t b = 0; b < 256; ++b)
          if (live.test(b)) by_byte[b].push_back(to);
      }
    std::vector<int32_t> row(256, -1);
    for (int b = 0; b < 256; ++b) {
      if (by_byte[size_t(b)].empty()) continue;
      std::vector<int> t = closure(std::move(by_byte[size_t(b)]));
      if ((work += int64_t(t.size())) > kMaxWork) fail("{}: the pattern's automaton takes too long to build", what);
      auto [it, fresh] = ids.emplace(t, int(sets.size()));
      if (fresh) {
        if (int(sets.size()) >= RegexDfa::kMaxDfaStates)
          fail("{}: the pattern's automaton would pass {} states", what, RegexDfa::kMaxDfaStates);
        sets.push_back(std::move(t));
      }
      row[size_t(b)] = it->second;
    }
    next.push_back(std::move(row));
  }
  const int n = int(sets.size());
  // Live states: those from which an accepting one can be reached.
  std::vector<uint8_t> acc(size_t(n), 0), live(size_t(n), 0);
  for (int d = 0; d < n; ++d) acc[size_t(d)] = std::binary_search(sets[size_t(d)].begin(), sets[size_t(d)].end(), accept);
  live = acc;
  for (bool changed = true; changed;) {
    changed = false;
    for (int d = 0; d < n; ++d) {
      if (live[size_t(d)]) continue;
      for (int b = 0; b < 256 && !live[size_t(d)]; ++b) {
        const int32_t t = next[size_t(d)][size_t(b)];
        if (t >= 0 && live[size_t(t)]) live[size_t(d)] = 1, changed = true;
      }
    }
  }
  if (!live[0] && use == RegexUse::Text) fail("{}: the pattern matches no text without NUL bytes", what);
  if (!live[0])
    fail("{}: the pattern matches no string written without '\"', '\\' or control characters", what);
  RegexDfa out;
  out.accept = acc;
  out.next.assign(size_t(n) * 256, 0);
  for (int d = 0; d < n; ++d)
    for (int b = 0; b < 256; ++b) {
      const int32_t t = next[size_t(d)][size_t(b)];
      if (t >= 0 && live[size_t(t)]) out.next[size_t(d) * 256 + size_t(b)] = uint16_t(t + 1);
    }
  return out;
}

std::string regex_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}/-").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

std::string format_pattern(std::string_view format) {
  const std::string date = "\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|"
                           "02-(?:0[1-9]|1\\d|2\\d))";
  const std::string time = "(?:[01]\\d|2[0-3]):[0-5]\\d:(?:[0-5]\\d|60)(?:\\.\\d{1,9})?(?:[Zz]|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)";
  const std::string octet = "(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
  if (format == "date") return "^" + date + "$";
  if (format == "time") return "^" + time + "$";
  if (format == "date-time") return "^" + date + "[Tt]" + time + "$";
  if (format == "uuid") return "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
  if (format == "email") return "^[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\\.[A-Za-z0-9-]+)*\\.[A-Za-z]{2,}$";
  if (format == "ipv4") return "^" + octet + "(?:\\." + octet + "){3}$";
  return "";
}

}  // namespace tf
