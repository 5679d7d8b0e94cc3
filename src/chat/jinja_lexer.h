// Jinja lexer: template source -> tokens, with the whitespace rules of jinja2 as Hugging Face
// configures it (trim_blocks and lstrip_blocks on, keep_trailing_newline off):
//   - "\r\n" and "\r" become "\n", and one trailing newline of the source is dropped;
//   - {%- / {{- / {#- strip all whitespace before the tag, -%} / -}} / -#} all after it;
//   - trim_blocks: the first newline after a block or comment tag is dropped (not after
//     {{ }}); a "+%}" keeps it;
//   - lstrip_blocks: spaces and tabs from the start of a line up to a block or comment tag
//     are dropped; "{%+" keeps them.
// Inside a tag, "}}" and "%}" only end it when brackets are balanced, so {{ {'a': {}} }}
// lexes. Comments disappear; {% raw %} ... {% endraw %} becomes plain text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf::jinja {

enum class Tok {
  Text,        // template text outside tags
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,      // text is the decoded value
  Int,
  Float,
  Op,          // text is the operator: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { } ;
  End,         // end of the template
};

struct Token {
  Tok type;
  std::string text;
  int line;
  int64_t int_value = 0;
  double float_value = 0;
};

std::vector<Token> tokenize(std::string_view source);

// Throws tf::Error("chat template: line N: what"): every template error names its line.
[[noreturn]] void fail_at(int line, const std::string& what);

}  // namespace tf::jinja
