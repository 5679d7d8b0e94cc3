// `twofold logits`: the float32 logits of the last prompt position, as JSON.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "model/tokenizer/tokenizer.h"
#include "tools/commands.h"
#include "twofold/engine.h"

namespace tf::cli {

void add_logits(CLI::App& app, Runner& run) {
  struct Args {
    ModelArgs model;
    std::string prompt;
    int tp = 1;
  };
  auto a = std::make_shared<Args>();
  CLI::App* c = app.add_subcommand("logits", "Print {\"ids\": [...], \"logits\": [...]} for the last prompt position");
  add_model_args(c, a->model);
  add_tp_arg(c, a->tp);
  add_prompt_arg(c, a->prompt)->required();
  c->callback([a, &run] {
    run = [a] {
      apply_threads(a->model.threads);
      EngineOptions eo = engine_options(a->model);
      eo.max_seqs = 1;
      eo.tensor_parallel = a->tp;
      Engine engine(eo);
      const std::vector<int32_t> ids = engine.tokenizer().encode(prompt_text(a->prompt));
      const std::vector<float> logits = engine.score(ids, /*all_positions=*/false);
      std::printf("%s\n", json_dump(nlohmann::json{{"ids", ids}, {"logits", logits}}).c_str());
      return 0;
    };
  });
}

}  // namespace tf::cli
