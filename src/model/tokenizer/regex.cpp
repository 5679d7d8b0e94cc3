#include "model/tokenizer/regex.h"

#include <pcre2.h>

#include <memory>

#include "core/error.h"
#include "model/tokenizer/json_field.h"

namespace tf::tok {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Per-thread JIT stack and match context. The default JIT stack (32 KiB) is too small for
// patterns like \s+(?!\S) on long whitespace runs; 8 MiB is plenty and costs nothing until used.
struct JitScratch {
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  JitScratch() {
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    if (stack && context) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~JitScratch() {
    if (context) pcre2_match_context_free(context);
    if (stack) pcre2_jit_stack_free(stack);
  }
};

pcre2_match_context* jit_context() {
  thread_local JitScratch scratch;
  return scratch.context;
}

struct MatchDataFree {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

}  // namespace

Regex::Regex(std::string_view pattern, std::string_view where) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                        PCRE2_UTF | PCRE2_UCP, &err, &err_offset, nullptr);
  if (!code_) {
    fail("{}: cannot compile regex {:?} at offset {}: {}", where, pattern, size_t(err_offset),
         pcre2_message(err));
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
  if (code_) pcre2_code_free(code_);
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  std::unique_ptr<pcre2_match_data, MatchDataFree> md(
      pcre2_match_data_create_from_pattern(code_, nullptr));
  TF_ASSERT(md, "out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  pcre2_match_context* ctx = jit_ ? jit_context() : nullptr;
  size_t offset = 0;
  // The subject was validated once by the caller; PCRE2_NO_UTF_CHECK skips re-checking it
  // on every call (which would make the scan quadratic).
  while (offset <= s.size()) {
    const int rc = pcre2_match(code_, subject, s.size(), offset, PCRE2_NO_UTF_CHECK, md.get(), ctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("regex {:?}: match failed: {}", pattern_, pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t begin = ov[0], end = ov[1];
    out.emplace_back(begin, end);
    if (end > begin) {
      offset = end;
    } else {
      // Empty match: step over one character.
      if (end >= s.size()) break;
      offset = end + 1;
      while (offset < s.size() && (uint8_t(s[offset]) & 0xC0) == 0x80) ++offset;
    }
  }
  return out;
}

Pattern Pattern::from_json(const nlohmann::json& j, const JsonAt& at) {
  Pattern p;
  if (const json* lit = json_find(j, "String")) {
    if (!lit->is_string() || lit->get_ref<const std::string&>().empty()) {
      (at / "String").fail("expected a non-empty string");
    }
    p.literal_ = lit->get<std::string>();
  } else if (const json* re = json_find(j, "Regex")) {
    if (!re->is_string()) (at / "Regex").fail("expected a string");
    const JsonAt at_re = at / "Regex";
    p.regex_ = std::make_shared<const Regex>(re->get<std::string>(), at_re.file + ": " + at_re.field);
  } else {
    at.fail("expected {{\"String\": ...}} or {{\"Regex\": ...}}");
  }
  return p;
}

std::vector<std::pair<size_t, size_t>> Pattern::find_all(std::string_view s) const {
  if (regex_) return regex_->find_all(s);
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t pos = s.find(literal_); pos != std::string_view::npos;
       pos = s.find(literal_, pos + literal_.size())) {
    out.emplace_back(pos, pos + literal_.size());
  }
  return out;
}

}  // namespace tf::tok
