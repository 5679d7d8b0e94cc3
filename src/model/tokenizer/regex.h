// A compiled Unicode regex (PCRE2 with UTF + UCP, JIT-compiled where the platform has it),
// used for the pre-tokenizer Split patterns and regex Replace normalizers.
//
// Hugging Face `tokenizers` uses Oniguruma; the patterns tokenizer.json files carry (\p{L},
// \p{N}, \s, (?i:...), (?!\S), {1,3}) mean the same in PCRE2 with UCP: \s is Unicode
// whitespace and \p{..} the Unicode general categories.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace tf::tok {

class Regex {
 public:
  // Throws tf::Error with `where` (file: field) and PCRE2's message if the pattern is bad.
  Regex(std::string_view pattern, std::string_view where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // All non-overlapping matches in `s` (valid UTF-8), left to right, as [begin, end) byte
  // ranges. An empty match is reported and the search resumes one character later, as
  // Rust's find_iter does.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
};

struct JsonAt;

// A tokenizer.json "pattern": {"String": "..."} (a literal) or {"Regex": "..."}.
class Pattern {
 public:
  static Pattern from_json(const nlohmann::json& j, const JsonAt& at);
  // Non-overlapping matches, left to right, as Regex::find_all.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;
  bool is_literal() const { return regex_ == nullptr; }
  const std::string& literal() const { return literal_; }

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;
};

}  // namespace tf::tok
