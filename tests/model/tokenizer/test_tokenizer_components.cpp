// Hugging Face tokenizer components against the `tokenizers` library itself.
//
// make_component_cases.py (run here; its output is kept in the build folder) builds small tokenizer.json files,
// one per configuration of normalizer / pre-tokenizer / decoder / post-processor, each with a
// BPE vocabulary trained for it, and writes what `tokenizers` answers for tricky strings
// (digits of several scripts, accents, emoji, whitespace runs, CJK, added tokens, empty) and
// for random id sequences. Each test below takes one family of configurations (by name
// prefix) and checks that twofold gives the same ids and the same decoded text, with and
// without special tokens.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tokenizer_test_util.h"

namespace tf {
namespace {

using nlohmann::json;

// The output of `cmd` (stdout), or "" if it fails.
std::string command_output(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  return ::pclose(p) == 0 ? out : std::string();
}

// Runs the script, or reuses what it wrote before for the same script and the same
// `tokenizers` version: ctest runs each test below as its own process, and the script takes
// a few seconds. The cases go to a fresh folder renamed into place, so concurrent test
// processes never see a half-written one.
class CasesEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const std::string script = test::source_path("tests/model/tokenizer/make_component_cases.py");
    const std::string python = TF_PYTHON3;
    const std::string version = command_output(python + " -c 'import tokenizers; print(tokenizers.__version__)'");
    if (version.empty()) {
      error = python + " cannot import the `tokenizers` Python package (scripts/install-deps.sh installs it)";
      return;
    }
    std::ifstream in(script, std::ios::binary);
    const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto key = std::hash<std::string>{}(source + "\n" + version);
    const std::filesystem::path cache = std::filesystem::path(TF_BINARY_DIR) / "tests" / "model" / "tokenizer" /
                                        ("component_cases_" + std::to_string(key));
    if (!std::filesystem::exists(cache / "cases.json")) {
      const std::filesystem::path fresh = cache.string() + ".tmp" + std::to_string(::getpid());
      std::filesystem::remove_all(fresh);
      const std::string cmd = python + " " + script + " " + fresh.string();
      if (const int rc = std::system(cmd.c_str()); rc != 0) {
        error = "`" + cmd + "` exited with " + std::to_string(rc);
        return;
      }
      std::error_code ec;
      std::filesystem::rename(fresh, cache, ec);  // fails if another process got there first
      std::filesystem::remove_all(fresh);
      // Cases of earlier versions of the script are not needed any more.
      for (const auto& e : std::filesystem::directory_iterator(cache.parent_path(), ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("component_cases_", 0) == 0 && name.find(".tmp") == std::string::npos && e.path() != cache)
          std::filesystem::remove_all(e.path(), ec);
      }
    }
    dir = cache;
    cases = test::load_json((dir / "cases.json").string());
  }

  std::filesystem::path dir;
  json cases;
  std::string error;
};

CasesEnvironment* const g_env =
    static_cast<CasesEnvironment*>(::testing::AddGlobalTestEnvironment(new CasesEnvironment));

class Components : public ::testing::TestWithParam<std::string> {};

std::string printable(const std::string& s) { return json(s).dump(-1, ' ', true, json::error_handler_t::replace); }

// The configurations of each family (names from make_component_cases.py).
const std::vector<std::string> kFamilies = {
    "digits_", "smollm2_style", "whitespace", "bert_pre_tokenizer", "char_delimiter_split", "bytelevel_",
    "sequence_", "punctuation_", "split_string_", "split_regex_", "metaspace_", "nf", "lowercase", "strip_",
    "replace_", "normalizer_sequence", "llama2_style", "prepend_"};

TEST_P(Components, SameIdsAndTextAsTokenizers) {
  ASSERT_TRUE(g_env->error.empty()) << g_env->error;
  int n_configs = 0;
  for (const auto& [name, c] : g_env->cases["configs"].items()) {
    if (name.rfind(GetParam(), 0) != 0) continue;
    ++n_configs;
    SCOPED_TRACE("configuration " + name + " (" + (g_env->dir / name / "tokenizer.json").string() + ")");
    std::unique_ptr<Tokenizer> tok;
    ASSERT_NO_THROW(tok = Tokenizer::from_files((g_env->dir / name / "tokenizer.json").string()));
    for (const json& e : c["encode"]) {
      const std::string text = e["text"];
      SCOPED_TRACE("text " + printable(text));
      const std::vector<int32_t> ids = tok->encode(text, /*add_special=*/true);
      EXPECT_EQ(ids, e["ids"].get<std::vector<int32_t>>());
      EXPECT_EQ(tok->encode(text, /*add_special=*/false), e["ids_plain"].get<std::vector<int32_t>>());
      const std::vector<int32_t> ref_ids = e["ids"];
      EXPECT_EQ(printable(tok->decode(ref_ids, /*skip_special=*/false)), printable(e["decoded"]));
      EXPECT_EQ(printable(tok->decode(ref_ids, /*skip_special=*/true)), printable(e["decoded_skip"]));
    }
    for (const json& d : c["decode"]) {
      const std::vector<int32_t> ids = d["ids"];
      SCOPED_TRACE("ids " + d["ids"].dump());
      EXPECT_EQ(printable(tok->decode(ids, /*skip_special=*/false)), printable(d["decoded"]));
      EXPECT_EQ(printable(tok->decode(ids, /*skip_special=*/true)), printable(d["decoded_skip"]));
    }
  }
  EXPECT_GT(n_configs, 0) << "no configuration named " << GetParam() << "* in cases.json";
}

INSTANTIATE_TEST_SUITE_P(Families, Components, ::testing::ValuesIn(kFamilies),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param;
                           if (!n.empty() && n.back() == '_') n.pop_back();
                           return n;
                         });

// Every configuration the script writes belongs to a family above, so none goes unchecked.
TEST(ComponentCases, EveryConfigurationIsInAFamily) {
  ASSERT_TRUE(g_env->error.empty()) << g_env->error;
  EXPECT_GE(g_env->cases["configs"].size(), 50u);
  for (const auto& [name, c] : g_env->cases["configs"].items()) {
    bool found = false;
    for (const std::string& f : kFamilies) found = found || name.rfind(f, 0) == 0;
    EXPECT_TRUE(found) << name;
  }
}

}  // namespace
}  // namespace tf
