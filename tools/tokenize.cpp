// `twofold tokenize` and `twofold detokenize`: the tokenizer alone, no weights loaded.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/split.h"
#include "model/tokenizer/tokenizer.h"
#include "tools/commands.h"

namespace tf::cli {

void add_tokenize(CLI::App& app, Runner& run) {
  struct Args {
    std::string dir, prompt;
    bool no_special = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("tokenize", "Print {\"ids\": [...]} for a text");
  c->add_option("-m,--model", a->dir, "Model folder (tokenizer.json) or GGUF file")->required()->check(CLI::ExistingPath);
  add_prompt_arg(c, a->prompt, "Text to tokenize")->required();
  c->add_flag("--no-special", a->no_special, "Do not add what the tokenizer adds by default (e.g. BOS)");
  c->callback([a, &run] {
    run = [a] {
      auto tok = Tokenizer::from_model(a->dir);
      std::printf("%s\n", json_dump(nlohmann::json{{"ids", tok->encode(prompt_text(a->prompt), !a->no_special)}}).c_str());
      return 0;
    };
  });
}

void add_detokenize(CLI::App& app, Runner& run) {
  struct Args {
    std::string dir, ids;
    bool skip_special = false;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("detokenize", "Print the text of comma-separated token ids");
  c->add_option("-m,--model", a->dir, "Model folder (tokenizer.json) or GGUF file")->required()->check(CLI::ExistingPath);
  c->add_option("--ids", a->ids, "Token ids, e.g. 1,2,3")->required();
  c->add_flag("--skip-special", a->skip_special, "Leave out special tokens");
  c->callback([a, &run] {
    run = [a] {
      auto tok = Tokenizer::from_model(a->dir);
      // An empty --ids is the empty text, as tokenize gives no ids for it.
      std::vector<int32_t> ids;
      if (!a->ids.empty())
        for (int64_t v : parse_int_list(a->ids, "--ids", 0, tok->n_vocab() - 1)) ids.push_back(int32_t(v));
      const std::string text = tok->decode(ids, a->skip_special);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::printf("\n");
      return 0;
    };
  });
}

}  // namespace tf::cli
