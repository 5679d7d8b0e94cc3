// `twofold chat`: a conversation with a model in the terminal.
//
// Each turn renders the whole conversation (system prompt, earlier turns, the new message)
// with the chat template, tokenizes it without adding special tokens (the template writes
// them, as the server does), and streams the answer. The engine's prefix cache keeps the KV
// blocks of the earlier turns, so a turn only computes what is new. /reset forgets the
// turns (not the system prompt); /exit (or end of input) quits.
//
// A thinking model's <think>...</think> block (when the template knows </think>, as Qwen3's
// does) is shown faint on a terminal, without its tags, and the answer after it plainly;
// through a pipe, between "<think>" and "</think>\n" (also when the prompt opened the block).
// --hide-reasoning leaves it out of what is shown (it stays in the conversation, where the
// template decides what earlier turns keep); --json gives it apart as "reasoning".
//
// Ctrl-C during an answer stops it (the part already shown stays in the conversation) and
// returns to the prompt; Ctrl-C at the prompt says how to quit, and a second one in a row
// quits. From a pipe the same rules apply; --json then prints one JSON object per input
// line, so that scripts can drive a conversation.
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "chat/chat_template.h"
#include "core/error.h"
#include "model/tokenizer/tokenizer.h"
#include "serve/reasoning.h"
#include "tools/chat_input.h"
#include "tools/commands.h"
#include "twofold/engine.h"

namespace tf::cli {
namespace {

using nlohmann::json;

struct ChatArgs {
  ModelArgs model;
  SamplingArgs sampling{.max_tokens = 512};
  std::string chat_template;
  std::string template_kwargs;  // --chat-template-kwargs
  std::string system;
  bool json = false;
  bool hide_reasoning = false;
  int tp = 1;
};

// What one turn produced.
struct Answer {
  std::string prompt;  // the rendered conversation the model saw
  std::string text;    // all of it, a <think> block included
  std::optional<std::string> reasoning;  // the <think> block's text (a thinking template), else none
  std::string content;                   // the text after it
  FinishReason finish = FinishReason::None;
  RequestStats stats;
};

class ChatSession {
 public:
  ChatSession(const ChatArgs& a, Engine& engine, ChatTemplate tmpl)
      : args_(a), engine_(engine), template_(std::move(tmpl)), kwargs_(chat_template_kwargs(a.template_kwargs)),
        thinking_(serve::reasoning_format_of_template(template_.source()) == serve::ReasoningFormat::Think),
        styled_(::isatty(STDOUT_FILENO) != 0), rng_(seed_of(a.sampling)) {
    reset();
  }

  void reset() {
    messages_ = json::array();
    if (!args_.system.empty()) messages_.push_back({{"role", "system"}, {"content", args_.system}});
  }

  // Answers `user`, streaming the text to stdout unless --json. The message and the answer
  // join the conversation; on an error (e.g. the conversation outgrew the context) neither
  // does, and the error is thrown.
  Answer answer(const std::string& user) {
    messages_.push_back({{"role", "user"}, {"content", user}});
    Answer out;
    try {
      out = generate();
    } catch (...) {
      messages_.erase(messages_.size() - 1);
      throw;
    }
    messages_.push_back({{"role", "assistant"}, {"content", out.text}});
    return out;
  }

 private:
  Answer generate() {
    const int64_t interrupts_before = n_interrupts();  // a press from here on stops this answer
    Answer out;
    out.prompt = template_.render(messages_, /*add_generation_prompt=*/true, nullptr, kwargs_);
    const std::vector<int32_t> ids = engine_.tokenizer().encode(out.prompt, /*add_special=*/false);
    RequestId id = -1;
    try {
      id = engine_.add_request({.prompt_ids = ids, .sampling = sampling_params(args_.sampling, rng_())});
    } catch (const Error& e) {
      fail("{} (the conversation so far is {} messages; /reset starts over)", e.what(), messages_.size());
    }
    std::optional<serve::ReasoningStream> split;
    const bool open = serve::prompt_opens_reasoning(out.prompt);
    if (thinking_) split.emplace(open);
    bool aborted = false;
    while (engine_.has_unfinished()) {
      if (!aborted && n_interrupts() != interrupts_before) {
        engine_.abort(id);
        aborted = true;
      }
      for (const RequestOutput& o : engine_.step()) {
        out.text += o.text;
        show(split ? split->feed(o.text) : serve::ReasoningSplit{.content = o.text});
        if (o.finished) out.finish = o.finish_reason;
      }
    }
    if (split) show(split->finish());
    end_faint();
    if (thinking_) {
      serve::ReasoningSplit parts = serve::split_reasoning(out.text, open);
      out.reasoning = std::move(parts.reasoning);
      out.content = std::move(parts.content);
    } else {
      out.content = out.text;
    }
    out.stats = engine_.stats(id);
    engine_.release(id);
    return out;
  }

  // Prints a piece of the answer: reasoning faint (terminal), between tags (pipe) or not at
  // all (--hide-reasoning); content plainly.
  void show(const serve::ReasoningSplit& piece) {
    if (args_.json) return;
    if (!piece.reasoning.empty() && !args_.hide_reasoning) {
      if (styled_ && !faint_) std::fputs("\033[2m", stdout), faint_ = true;
      if (!styled_ && !tag_open_) std::fputs("<think>", stdout), tag_open_ = true;
      std::fwrite(piece.reasoning.data(), 1, piece.reasoning.size(), stdout);
    }
    if (!piece.content.empty()) {
      end_faint();
      std::fwrite(piece.content.data(), 1, piece.content.size(), stdout);
    }
    std::fflush(stdout);
  }
  void end_faint() {
    if (faint_) std::fputs("\033[0m\n", stdout), faint_ = false;
    if (tag_open_) std::fputs("</think>\n", stdout), tag_open_ = false;
  }

  const ChatArgs& args_;
  Engine& engine_;
  ChatTemplate template_;
  json kwargs_;  // the template's extra variables
  bool thinking_;          // the template knows </think>: answers are split into reasoning and content
  bool styled_;            // stdout is a terminal
  bool faint_ = false;     // a faint reasoning run is being printed
  bool tag_open_ = false;  // pipe: "<think>" was printed and its "</think>" not yet
  std::mt19937_64 rng_;  // one sampling seed per turn: the same --seed gives the same conversation
  json messages_;
};

ChatTemplate template_for(const ChatArgs& a) {
  std::optional<ChatTemplate> t = load_chat_template(a.model.dir, a.chat_template);
  if (!t)
    fail("{} has no chat template (no chat_template.jinja, no chat_template in tokenizer_config.json): give one "
         "with --chat-template FILE (examples/chatml.jinja is ChatML)",
         a.model.dir);
  return std::move(*t);
}

void print_json(const json& j) {
  std::printf("%s\n", json_dump(j).c_str());
  std::fflush(stdout);
}

void report(const ChatArgs& a, bool tty, const std::string& user, const Answer& ans) {
  if (a.json) {
    print_json({{"user", user}, {"prompt", ans.prompt}, {"text", ans.text},
                {"reasoning", ans.reasoning ? json(*ans.reasoning) : json(nullptr)}, {"content", ans.content},
                {"finish_reason", finish_reason_name(ans.finish)},
                {"prompt_tokens", ans.stats.n_prompt_tokens}, {"completion_tokens", ans.stats.n_output_tokens}});
    return;
  }
  std::printf("\n");
  std::fflush(stdout);
  if (ans.finish == FinishReason::Abort) std::fprintf(stderr, "[interrupted]\n");
  if (tty)
    std::fprintf(stderr, "[%d tokens, %.1f tokens/s%s]\n", ans.stats.n_output_tokens, ans.stats.decode_tokens_per_s,
                 ans.finish == FinishReason::Length ? ", stopped at the token limit (-n)" : "");
}

void report_error(const ChatArgs& a, const std::string& what) {
  if (a.json) {
    print_json({{"error", what}});
  } else {
    std::fprintf(stderr, "twofold chat: %s\n", what.c_str());
  }
}

const char* kHelp =
    "/reset clears the conversation (the --system prompt stays), /exit quits (so does Ctrl-D);\n"
    "end a line with \\ to continue the message on the next line, or open and close a block with \"\"\".\n"
    "Ctrl-C stops an answer; at the prompt, Ctrl-C twice quits.\n";

int run_chat(const ChatArgs& a) {
  apply_threads(a.model.threads);
  ChatTemplate tmpl = template_for(a);
  EngineOptions eo = engine_options(a.model);
  eo.max_seqs = 1;
  eo.tensor_parallel = a.tp;
  Engine engine(eo);
  ChatSession session(a, engine, std::move(tmpl));
  const bool tty = ::isatty(STDIN_FILENO) != 0;
  if (tty) std::fprintf(stderr, "twofold chat with %s\n%s", a.model.dir.c_str(), kHelp);
  catch_interrupts();  // from here on, Ctrl-C is an event, not the end of the process

  LineInput in;
  bool interrupted_at_prompt = false;
  std::string message;
  for (;;) {
    const LineInput::Status st = read_message(in, tty ? ">>> " : "", tty ? "... " : "", message);
    if (st == LineInput::Status::Eof) break;
    if (st == LineInput::Status::Interrupted) {
      if (interrupted_at_prompt) break;
      interrupted_at_prompt = true;
      if (tty) std::fprintf(stderr, "\n(Ctrl-C again, /exit or Ctrl-D quits)\n");
      continue;
    }
    interrupted_at_prompt = false;
    if (message.find_first_not_of(" \t\r\n") == std::string::npos) continue;
    if (message == "/exit" || message == "/quit") break;
    if (message == "/reset") {
      session.reset();
      if (a.json) print_json({{"reset", true}});
      if (tty) std::fprintf(stderr, "(conversation cleared)\n");
      continue;
    }
    if (message == "/help") {
      std::fputs(kHelp, stderr);
      continue;
    }
    if (message[0] == '/' && message.find_first_of(" \t\n") == std::string::npos) {
      report_error(a, "unknown command " + message + " (/reset, /exit, /help)");
      continue;
    }
    try {
      const Answer ans = session.answer(message);
      report(a, tty, message, ans);
    } catch (const Error& e) {
      report_error(a, e.what());
    }
    in.forget_interrupts();  // the press that stopped the answer is not a press at the prompt
  }
  if (tty) std::fprintf(stderr, "\n");
  return 0;
}

}  // namespace

void add_chat(CLI::App& app, Runner& run) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* c = app.add_subcommand("chat", "Talk with a model in the terminal, with its chat template");
  c->footer(std::string("\nInput: one message per line. ") + kHelp +
            "From a pipe the same rules apply; with --json each input line gets one JSON line back.");
  add_model_args(c, a->model);
  add_tp_arg(c, a->tp);
  add_chat_template_arg(c, a->chat_template);
  add_chat_template_kwargs_arg(c, a->template_kwargs);
  c->add_option("--system", a->system, "System prompt, first in the conversation (kept by /reset)");
  add_sampling_args(c, a->sampling);
  c->add_flag("--json", a->json,
              "Print one JSON object per input line: {user, prompt, text, reasoning, content, finish_reason, "
              "prompt_tokens, completion_tokens} for a message (reasoning: the <think> block of a thinking "
              "template, else null; content: the text after it), {reset: true} for /reset, {error} for a "
              "refused message");
  c->add_flag("--hide-reasoning", a->hide_reasoning,
              "Do not show a thinking model's <think> block (shown faint on a terminal otherwise)");
  c->callback([a, &run] { run = [a] { return run_chat(*a); }; });
}

}  // namespace tf::cli
