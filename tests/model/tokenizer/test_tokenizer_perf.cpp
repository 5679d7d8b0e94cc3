// Loading a large tokenizer.json and encoding ~600 KB of text are both well under a second
// (Release build). Prints the measured numbers.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

#include "model/tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace tf {
namespace {

#ifdef NDEBUG
constexpr double kLimitS = 1.0;
#else
constexpr double kLimitS = 20.0;  // unoptimized builds are far slower; still catch blowups
#endif

// Work done by this thread, in seconds. The limits are checked on CPU time rather than wall
// time: the test machine is shared (other builds run beside the tests), and CPU time measures
// the tokenizer's cost without the time it spent waiting for a core.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

struct Timer {
  std::chrono::steady_clock::time_point wall0 = std::chrono::steady_clock::now();
  double cpu0 = thread_cpu_s();
  double wall_s() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count(); }
  double cpu_s() const { return thread_cpu_s() - cpu0; }
};

// ~600 KB of text with a skewed word distribution (like natural text, so the word cache sees
// both hits and misses): ASCII words, capitalised words, numbers, punctuation, newlines, and
// some Cyrillic, CJK and emoji.
std::string sample_text(size_t n_bytes) {
  std::mt19937 rng(2024);
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  const char* extras[] = {"Привет", "мир", "漢字", "测试", "かな", "😀", "café", "naïve", "Ελληνικά"};
  std::vector<std::string> words;
  for (int i = 0; i < 30000; ++i) {
    std::string w;
    if (i % 50 == 0) {
      w = extras[rng() % std::size(extras)];
    } else {
      const size_t len = 1 + rng() % 9;
      for (size_t k = 0; k < len; ++k) w += letters[std::min<size_t>(rng() % 26, rng() % 26)];
    }
    if (i % 7 == 0) w[0] = char(std::toupper(uint8_t(w[0])));
    words.push_back(w);
  }
  std::uniform_real_distribution<double> u(0, 1);
  std::string text;
  while (text.size() < n_bytes) {
    const double x = u(rng);
    text += words[size_t(double(words.size()) * x * x * x)];
    const uint32_t r = rng() % 100;
    if (r < 6) {
      text += ", ";
    } else if (r < 9) {
      text += ". ";
    } else if (r < 11) {
      text += ".\n\n";
    } else if (r < 13) {
      text += ' ';
      text += std::to_string(rng() % 100000);
      text += ' ';
    } else {
      text += " ";
    }
  }
  return text;
}

struct Case {
  const char* name;
  friend void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
};

class TokenizerPerf : public testing::TestWithParam<Case> {};

TEST_P(TokenizerPerf, LoadAndEncode600KB) {
  const std::string name = GetParam().name;
  Timer t_load;
  const auto tok = name == "tiny-main" ? Tokenizer::from_dir(test::model_dir(name)) : test::load_real_tokenizer(name);
  const double load_cpu = t_load.cpu_s(), load_wall = t_load.wall_s();

  const std::string text = sample_text(600 * 1024);
  ASSERT_TRUE(tok::utf8_is_valid(text));
  const double mb = double(text.size()) / 1e6;
  Timer t_cold;
  const std::vector<int32_t> ids = tok->encode(text);
  const double cold_cpu = t_cold.cpu_s(), cold_wall = t_cold.wall_s();
  Timer t_warm;
  const std::vector<int32_t> again = tok->encode(text);
  const double warm_cpu = t_warm.cpu_s(), warm_wall = t_warm.wall_s();
  Timer t_decode;
  const std::string decoded = tok->decode(ids);
  const double decode_cpu = t_decode.cpu_s();

  std::printf("[perf] %-16s load %.3f s cpu (%.3f s wall), n_vocab %d\n", name.c_str(), load_cpu, load_wall,
              tok->n_vocab());
  std::printf("[perf] %-16s encode %.0f KB -> %zu tokens: cold %.3f s cpu = %.1f MB/s (%.3f s wall), "
              "warm cache %.3f s cpu = %.1f MB/s (%.3f s wall); decode %.3f s cpu\n",
              name.c_str(), double(text.size()) / 1024, ids.size(), cold_cpu, mb / cold_cpu, cold_wall, warm_cpu,
              mb / warm_cpu, warm_wall, decode_cpu);
  EXPECT_EQ(ids, again);
  EXPECT_GT(ids.size(), text.size() / 20);
  // The text is ASCII-heavy and already NFC, so every tokenizer gives it back exactly (the SPM
  // one strips the space its normalizer prepended).
  const std::string plain = tok->decode(tok->encode(text, /*add_special=*/false));
  EXPECT_TRUE(plain == text) << "decode(encode(text)) differs from text";
  EXPECT_LT(load_cpu, kLimitS);
  EXPECT_LT(cold_cpu, kLimitS);
  EXPECT_LT(warm_cpu, kLimitS);
}

INSTANTIATE_TEST_SUITE_P(All, TokenizerPerf,
                         testing::Values(Case{"tiny-main"}, Case{"spm-mistral-32k"}, Case{"llama3-128k"},
                                         Case{"qwen3-151k"}),
                         [](const auto& info) {
                           std::string s = info.param.name;
                           for (char& c : s) {
                             if (!isalnum(uint8_t(c))) c = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace tf
