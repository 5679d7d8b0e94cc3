// `twofold chat` driven through a pipe, as a script drives it, with tiny-main and the bundled
// ChatML template (examples/chatml.jinja): template rendering, history across turns, /reset,
// --system, multi-line input, errors that leave the session going, Ctrl-C during an answer.
// Also `-p -` (the prompt from standard input) on every verb that takes -p.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "tools/cli_util.h"

namespace tf {
namespace {

using nlohmann::json;
using test::run_twofold;
using test::shell_quote;

const std::string kTiny = test::model_dir("tiny-main");
const std::string kChatMl = test::source_path("examples/chatml.jinja");
// One thread: the answers are short and CI's cores are shared by parallel tests.
const std::string kChat = "chat -m " + kTiny + " --chat-template " + kChatMl + " -t 1 --temp 0 --ignore-eos";

std::string chatml(const std::string& role, const std::string& content) {
  return "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
}
const std::string kAssistant = "<|im_start|>assistant\n";

class ChatCli : public test::TempDirTest {
 protected:
  // Runs `twofold <args>` with `input` on its standard input.
  test::CliResult run_with_input(const std::string& args, const std::string& input) {
    const auto path = dir_ / "input.txt";
    std::ofstream(path, std::ios::binary) << input;
    return run_twofold(args + " < " + shell_quote(path.string()));
  }
  // The JSON lines `chat --json` printed, one per input line.
  std::vector<json> chat_json(const std::string& flags, const std::string& input) {
    const auto r = run_with_input(kChat + " --json " + flags, input);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<json> lines;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) lines.push_back(json::parse(line));
    return lines;
  }
};

TEST_F(ChatCli, ModelWithoutTemplateIsAClearError) {
  const auto r = run_with_input("chat -m " + kTiny, "Hello\n");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.signal, 0);
  EXPECT_CONTAINS(r.err, "has no chat template");
  EXPECT_CONTAINS(r.err, "--chat-template FILE");
  const auto missing = run_with_input("chat -m " + kTiny + " --chat-template /nonexistent.jinja", "Hello\n");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_CONTAINS(missing.err, "/nonexistent.jinja");
}

TEST_F(ChatCli, HistoryAcrossTurnsAndReset) {
  const auto lines = chat_json("-n 4", "Hello there\nHow are you\n/reset\nThird\n");
  ASSERT_EQ(lines.size(), 4u);
  // Turn 1: the template renders the one message and the generation prompt.
  const json& t1 = lines[0];
  EXPECT_EQ(t1["user"], "Hello there");
  EXPECT_EQ(t1["prompt"], chatml("user", "Hello there") + kAssistant);
  EXPECT_EQ(t1["completion_tokens"], 4);
  EXPECT_EQ(t1["finish_reason"], "length");
  // Turn 2: the first turn, its answer as the assistant's message, then the new message.
  const json& t2 = lines[1];
  EXPECT_EQ(t2["prompt"], chatml("user", "Hello there") + chatml("assistant", t1["text"]) +
                              chatml("user", "How are you") + kAssistant);
  EXPECT_GT(t2["prompt_tokens"].get<int>(), t1["prompt_tokens"].get<int>());
  // /reset, then a conversation that starts over.
  EXPECT_EQ(lines[2], json({{"reset", true}}));
  EXPECT_EQ(lines[3]["prompt"], chatml("user", "Third") + kAssistant);
  // Greedy: the first answer is the same whenever the conversation is the same.
  EXPECT_EQ(lines[3]["completion_tokens"], 4);
  const auto again = chat_json("-n 4", "Hello there\n");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0]["text"], t1["text"]);
}

// --chat-template-kwargs: Qwen3's template (its tokenizer_config.json's) renders
// enable_thinking false as a closed <think> block; a value that is not a JSON object is refused
// naming the flag.
TEST_F(ChatCli, TemplateKwargsReachTheTemplate) {
  std::ifstream cfg(test::data_path("tokenizers/qwen3-151k/tokenizer_config.json"));
  const auto qwen3 = dir_ / "qwen3.jinja";
  std::ofstream(qwen3) << json::parse(cfg)["chat_template"].get<std::string>();
  const std::string base = "chat -m " + kTiny + " --chat-template " + shell_quote(qwen3.string()) +
                           " -t 1 --temp 0 --ignore-eos -n 2 --json";
  const auto off = run_with_input(base + " --chat-template-kwargs '{\"enable_thinking\": false}'", "Hi\n");
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_TRUE(json::parse(off.out)["prompt"].get<std::string>().ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"))
      << off.out;
  const auto on = run_with_input(base, "Hi\n");
  ASSERT_EQ(on.exit_code, 0) << on.err;
  EXPECT_TRUE(json::parse(on.out)["prompt"].get<std::string>().ends_with("<|im_start|>assistant\n")) << on.out;
  for (const char* bad : {"'[1]'", "'{\"a\": '"}) {
    const auto r = run_with_input(base + " --chat-template-kwargs " + bad, "Hi\n");
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_CONTAINS(r.err, "--chat-template-kwargs");
  }
}

// A template that opens the <think> block in the prompt (as DeepSeek-R1's does) and knows
// </think>: tiny-main's whole answer is reasoning. --json gives it apart; through a pipe it is
// shown between the tags, or not at all with --hide-reasoning, and stays in the conversation.
TEST_F(ChatCli, ReasoningApartShownBetweenTagsOrHidden) {
  const auto tmpl = dir_ / "think.jinja";
  std::ofstream(tmpl) << "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + "
                         "(m['content'].split('</think>')[-1] if m['role'] == 'assistant' else m['content']) + "
                         "'<|im_end|>\\n' }}{% endfor %}"
                         "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}";
  const std::string base = "chat -m " + kTiny + " --chat-template " + shell_quote(tmpl.string()) +
                           " -t 1 --temp 0 --ignore-eos -n 6";
  const auto j = run_with_input(base + " --json", "Why?\n");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const json line = json::parse(j.out);
  ASSERT_FALSE(line["text"].get<std::string>().empty());
  EXPECT_EQ(line["reasoning"], line["text"]);  // cut off while thinking: all of it
  EXPECT_EQ(line["content"], "");
  const auto shown = run_with_input(base, "Why?\n");
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_EQ(shown.out, "<think>" + line["text"].get<std::string>() + "</think>\n\n");
  const auto hidden = run_with_input(base + " --hide-reasoning", "Why?\n");
  ASSERT_EQ(hidden.exit_code, 0) << hidden.err;
  EXPECT_EQ(hidden.out, "\n");
  // A template without </think> leaves the text whole: reasoning null.
  const auto plain = chat_json("-n 3", "Hi\n");
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_TRUE(plain[0]["reasoning"].is_null());
  EXPECT_EQ(plain[0]["content"], plain[0]["text"]);
}

TEST_F(ChatCli, SystemPromptStaysAfterReset) {
  const auto lines = chat_json("-n 2 --system 'Be brief.'", "Hi\n/reset\nBye\n");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["prompt"], chatml("system", "Be brief.") + chatml("user", "Hi") + kAssistant);
  EXPECT_EQ(lines[2]["prompt"], chatml("system", "Be brief.") + chatml("user", "Bye") + kAssistant);
}

TEST_F(ChatCli, MultiLineMessages) {
  const std::string input =
      "line one\\\nline two\n"                    // a trailing backslash continues the message
      "\"\"\"\nblock a\n\nblock b\n\"\"\"\n"      // a """ block keeps blank lines
      "\"\"\"inline\"\"\"\n"                      // opened and closed on one line
      "   \n";                                    // blank: ignored
  const auto lines = chat_json("-n 1", input);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["user"], "line one\nline two");
  EXPECT_EQ(lines[1]["user"], "block a\n\nblock b");
  EXPECT_EQ(lines[2]["user"], "inline");
  EXPECT_CONTAINS(lines[2]["prompt"].get<std::string>(), chatml("user", "block a\n\nblock b"));
}

TEST_F(ChatCli, RefusedMessagesLeaveTheSessionGoing) {
  std::string too_long;
  for (int i = 0; i < 1500; ++i) too_long += "the sheep ";
  const auto lines = chat_json("-n 2", "/nonsense\n" + too_long + "\nHi\n");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_CONTAINS(lines[0]["error"].get<std::string>(), "unknown command /nonsense");
  EXPECT_CONTAINS(lines[1]["error"].get<std::string>(), "context");
  EXPECT_CONTAINS(lines[1]["error"].get<std::string>(), "/reset");
  // The refused message did not join the conversation.
  EXPECT_EQ(lines[2]["prompt"], chatml("user", "Hi") + kAssistant);
}

TEST_F(ChatCli, PlainOutputFromAPipeAndExit) {
  const auto r = run_with_input(kChat + " -n 3", "Hi\n/exit\nnever answered\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto json_run = chat_json("-n 3", "Hi\n");
  ASSERT_EQ(json_run.size(), 1u);
  EXPECT_EQ(r.out, json_run[0]["text"].get<std::string>() + "\n");
}

TEST_F(ChatCli, SameSeedSameConversation) {
  auto texts = [&](int seed) {
    const auto r = run_with_input("chat -m " + kTiny + " --chat-template " + kChatMl + " -t 1 -n 6 --temp 1 --seed " +
                                      std::to_string(seed),
                                  "Hi\nAgain\n");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out;
  };
  const std::string a = texts(7);
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, texts(7));
}

// A child process with pipes on its standard input, output and error.
struct Child {
  pid_t pid = -1;
  int in = -1, out = -1, err = -1;
};

Child spawn(const std::vector<std::string>& args) {
  int pin[2], pout[2], perr[2];
  if (::pipe(pin) != 0 || ::pipe(pout) != 0 || ::pipe(perr) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pin[0], 0);
    ::dup2(pout[1], 1);
    ::dup2(perr[1], 2);
    for (int fd : {pin[0], pin[1], pout[0], pout[1], perr[0], perr[1]}) ::close(fd);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(pin[0]);
  ::close(pout[1]);
  ::close(perr[1]);
  return {pid, pin[1], pout[0], perr[0]};
}

// Reads from fd until `enough(text)` or the deadline; returns what was read.
template <typename Pred>
std::string read_until(int fd, std::string text, Pred enough, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!enough(text) && std::chrono::steady_clock::now() < deadline) {
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, size_t(n));
  }
  return text;
}

// Ctrl-C during an answer stops that answer and the program reads the next message; at the
// prompt, a second Ctrl-C in a row quits.
TEST(ChatCliSignal, CtrlCStopsTheAnswerNotTheProgram) {
  const std::string bin = std::string(TF_BINARY_DIR) + "/tools/twofold";
  Child c = spawn({bin, "chat", "-m", kTiny, "--chat-template", kChatMl, "-t", "1", "--temp", "0", "--ignore-eos",
                   "-n", "600"});
  ASSERT_GT(c.pid, 0);
  auto send = [&](const std::string& text) { return ::write(c.in, text.data(), text.size()) == ssize_t(text.size()); };
  ASSERT_TRUE(send("Tell me a long story\n"));
  // The answer has started streaming: interrupt it.
  std::string out = read_until(c.out, "", [](const std::string& t) { return !t.empty(); }, std::chrono::seconds(120));
  ASSERT_FALSE(out.empty()) << "no answer streamed";
  ASSERT_EQ(::kill(c.pid, SIGINT), 0);
  // The program reads on: an unknown command is answered on stderr.
  ASSERT_TRUE(send("/nonsense\n"));
  const auto answered = [](const std::string& t) { return t.find("unknown command") != std::string::npos; };
  std::string err = read_until(c.err, "", answered, std::chrono::seconds(120));
  ASSERT_TRUE(answered(err)) << err;
  // At the prompt: one Ctrl-C does not quit, a second one does (standard input still open).
  ASSERT_EQ(::kill(c.pid, SIGINT), 0);
  ::usleep(1000 * 1000);
  ASSERT_EQ(::waitpid(c.pid, nullptr, WNOHANG), 0) << "quit at the first Ctrl-C";
  ASSERT_EQ(::kill(c.pid, SIGINT), 0);
  int status = 0;
  pid_t exited = 0;
  for (int i = 0; i < 300 && exited == 0; ++i) {
    exited = ::waitpid(c.pid, &status, WNOHANG);
    if (exited == 0) ::usleep(100 * 1000);
  }
  if (exited != c.pid) {
    ::kill(c.pid, SIGKILL);
    ::waitpid(c.pid, nullptr, 0);
  }
  err = read_until(c.err, err, [](const std::string&) { return false; }, std::chrono::seconds(5));
  out = read_until(c.out, out, [](const std::string&) { return false; }, std::chrono::seconds(5));
  for (int fd : {c.in, c.out, c.err}) ::close(fd);
  ASSERT_EQ(exited, c.pid) << "still running 30 s after the second Ctrl-C";
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << err;
  EXPECT_EQ(err, "[interrupted]\ntwofold chat: unknown command /nonsense (/reset, /exit, /help)\n");
  // The interrupted answer ends with its newline like any other.
  EXPECT_EQ(out.back(), '\n');
}

// `-p -`: the prompt is standard input's bytes, on every verb that takes -p.
TEST_F(ChatCli, PromptFromStandardInput) {
  const std::string text = "In the beginning\nwas the word";
  const auto tok_arg = run_twofold("tokenize -m " + kTiny + " -p " + shell_quote(text));
  const auto tok_in = run_with_input("tokenize -m " + kTiny + " -p -", text);
  ASSERT_EQ(tok_arg.exit_code, 0) << tok_arg.err;
  EXPECT_EQ(tok_in.out, tok_arg.out);

  const auto gen_arg = run_twofold("generate -m " + kTiny + " -t 1 -n 4 --temp 0 --json -p " + shell_quote(text));
  const auto gen_in = run_with_input("generate -m " + kTiny + " -t 1 -n 4 --temp 0 --json -p -", text);
  ASSERT_EQ(gen_arg.exit_code, 0) << gen_arg.err;
  EXPECT_EQ(gen_in.out, gen_arg.out);

  const auto log_arg = run_twofold("logits -m " + kTiny + " -t 1 -p " + shell_quote(text));
  const auto log_in = run_with_input("logits -m " + kTiny + " -t 1 -p -", text);
  ASSERT_EQ(log_arg.exit_code, 0) << log_arg.err;
  EXPECT_EQ(log_in.out, log_arg.out);

  // Empty standard input is an empty prompt: the engine's own error, not a crash.
  const auto empty = run_with_input("generate -m " + kTiny + " -t 1 -n 2 -p -", "");
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_EQ(empty.signal, 0);
}

}  // namespace
}  // namespace tf
