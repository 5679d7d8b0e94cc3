// A byte-at-a-time recognizer of the JSON texts a compiled schema (json_schema.h) allows, for
// constrained decoding. As JsonMachine, feed() takes a byte only if the text stays a prefix of
// some allowed text, so a constrained model never reaches a dead end (up to the limits below).
//
// The machine is a set of threads, each a stack of frames (a node of the schema and where its
// value stands: an object's property and phase, an array's count). A frame of an "anyOf" (or
// a type list) is replaced, when its value starts, by one thread per alternative; a thread
// dies at the first byte it cannot take, so alternatives sharing a prefix ({"a": 1} and
// {"a": 1, "b": 2}) run side by side until a byte tells them apart. An enum's values (and
// const, true/false, null) are one frame that narrows a sorted range of candidates byte by
// byte.
// Strings, numbers and whitespace between tokens follow json_lexemes.h, as in JsonMachine;
// no whitespace before the root.
// Limits: kMaxFrames nested values (a recursive schema stops nesting there), kMaxThreads
// threads (past it the later alternatives are dropped: what remains is still allowed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sample/json_lexemes.h"
#include "sample/json_schema.h"

namespace tf {

class SchemaMachine {
 public:
  static constexpr int kMaxFrames = 32;
  static constexpr int kMaxThreads = 16;

  // The schema must outlive the machine.
  explicit SchemaMachine(const JsonSchema& schema);
  SchemaMachine(const SchemaMachine& o) { *this = o; }
  SchemaMachine& operator=(const SchemaMachine& o);

  // Takes c if the text stays a prefix of an allowed text; otherwise false, state unchanged.
  bool feed(uint8_t c);
  bool feed(std::string_view s);  // all or nothing
  // The text is a whole allowed value (the root object is closed).
  bool complete() const;

  bool operator==(const SchemaMachine& o) const;
  size_t hash() const;

 private:
  // No default member initializers: a machine is copied once per trie edge while masks are
  // computed, and only the frames in use are ever read.
  struct Frame {
    int32_t node;
    uint16_t i;     // Object: the property; Array: items so far
    uint8_t phase;  // per kind, see schema_machine.cpp
  };
  // Where the top frame's scalar stands (a string, number, literal or key being read) and the
  // whitespace run; only the top frame reads bytes, so one copy a thread suffices.
  struct Scalar {
    uint16_t pos = 0;          // Literal / key / Wrap: bytes matched
    uint16_t lo = 0, hi = 0;   // Literal: the literals [lo, hi) that begin with those bytes
    JsonString str;
    JsonNumber num;
    uint8_t ws = 0, indent = 0;  // take_json_whitespace's run and indent
    uint16_t chars = 0;          // String with a length bound: characters so far
    uint16_t re = 0;             // String with a pattern: its DFA's state
    uint8_t digits = 0;          // Integer with bounds: its sign and digits so far
    bool neg = false;
    uint64_t mag = 0;
    bool operator==(const Scalar&) const = default;
  };
  struct Thread {
    uint8_t depth = 0;
    Scalar s;
    Frame frames[kMaxFrames];
    bool same(const Thread& o) const;
    void copy_used(const Thread& o);  // depth, s and the frames in use
  };
  struct Out {
    Thread t[kMaxThreads];
    int n = 0;
    void add(const Thread& th);
  };

  void push_alternatives(Thread t, int32_t node, Out& out) const;
  void step(Thread t, uint8_t c, Out& out) const;
  void key_byte(Thread& t, const SchemaNode& n, uint8_t c, Out& out) const;
  static bool integer_digit(const SchemaNode& n, Scalar& s, uint8_t c);
  static bool integer_in_range(const SchemaNode& n, const Scalar& s);
  void start_value(Thread t, int32_t node, uint8_t c, Out& out) const;
  void end_value(Thread t, uint8_t c, bool feed_c, Out& out) const;
  static bool whitespace(Thread& t, uint8_t c);

  const JsonSchema* schema_;
  int n_ = 0;
  Thread t_[kMaxThreads];
};

}  // namespace tf
