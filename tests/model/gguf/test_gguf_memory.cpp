// Resident memory of a GGUF model on the CPU backend: its quantized matrices kept in their
// blocks (the default) against dequantized to F32 at load (--dequantize). Each load runs in a
// forked child, which reads its own /proc/self/status after loading and scoring a short
// prompt, so the two measurements do not share an allocator or page cache state. This binary
// holds only this test: the fork happens before any thread exists in the parent.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "test_util.h"
#include "twofold/engine.h"

namespace tf {
namespace {

struct Rss {
  int64_t total_kb = -1, anon_kb = -1, file_kb = -1;  // VmRSS, RssAnon, RssFile
};

Rss own_rss() {
  Rss r;
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    const auto field = [&](const char* key, int64_t* out) {
      if (line.rfind(key, 0) == 0) *out = std::stoll(line.substr(std::string(key).size()));
    };
    field("VmRSS:", &r.total_kb);
    field("RssAnon:", &r.anon_kb);
    field("RssFile:", &r.file_kb);
  }
  return r;
}

// The resident set of a child that loads `model` and scores a few tokens.
Rss child_rss(const std::string& model, bool dequantize) {
  int fd[2];
  EXPECT_EQ(pipe(fd), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    Rss r;
    try {
      Engine e(EngineOptions{.model_dir = model, .weights = {.dequantize_gguf = dequantize}, .max_seqs = 1});
      (void)e.score({1, 2, 3, 4}, /*all_positions=*/false);
      r = own_rss();
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "child: %s\n", ex.what());
    }
    const ssize_t n = write(fd[1], &r, sizeof r);
    _exit(n == sizeof r ? 0 : 1);
  }
  close(fd[1]);
  Rss r;
  EXPECT_EQ(read(fd[0], &r, sizeof r), ssize_t(sizeof r));
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  return r;
}

void expect_less_resident(const std::string& model, const char* name) {
  const Rss q = child_rss(model, /*dequantize=*/false), d = child_rss(model, /*dequantize=*/true);
  ASSERT_GT(q.total_kb, 0) << name << ": the quantized load failed";
  ASSERT_GT(d.total_kb, 0) << name << ": the dequantized load failed";
  std::printf("[ measured ] %s resident after load + one prompt: quantized %.1f MiB (anonymous %.1f, file %.1f), "
              "dequantized %.1f MiB (anonymous %.1f, file %.1f)\n", name, q.total_kb / 1024.0, q.anon_kb / 1024.0,
              q.file_kb / 1024.0, d.total_kb / 1024.0, d.anon_kb / 1024.0, d.file_kb / 1024.0);
  EXPECT_LT(q.total_kb, d.total_kb) << name;
  EXPECT_LT(q.anon_kb, d.anon_kb) << name;
}

TEST(GgufMemory, QuantizedTinyMainIsSmallerThanDequantized) {
  expect_less_resident(test::source_path("models/gguf/tiny-main-q8_0.gguf"), "tiny-main q8_0");
  expect_less_resident(test::source_path("models/gguf/tiny-main-q4_0.gguf"), "tiny-main q4_0");
}

TEST(GgufMemory, QuantizedSmolLM2IsSmallerThanDequantized) {
  const nlohmann::json j = test::load_json(std::string(TF_SMOLLM2_REF_DIR) + "/smollm2.json");
  expect_less_resident(j["gguf"].get<std::string>(), "SmolLM2-135M-Instruct Q4_1");
}

}  // namespace
}  // namespace tf
