// What constrained decoding costs on the host per token, for real vocabularies: the trie's
// build, one walk of the trie per machine state (a cache miss), and the mask of a kept state
// applied to a row of logits; then random draws under the mask (closing bytes favoured, as
// tests/sample/test_json_constraint.cpp makes them) for the cost per token of a generation,
// misses included. For JSON objects (JsonMachine) and for a schema (SchemaMachine). Prints
// numbers, asserts nothing.
//
//   build/bench/bench_json_mask TOKENIZER_DIR... [--draws N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "sample/json_machine.h"
#include "sample/json_schema.h"
#include "sample/schema_machine.h"
#include "sample/token_constraint.h"

namespace tf {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"type": "string"}, "age": {"type": "integer"}, "role": {"enum": ["admin", "user", "guest"]},
  "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4},
  "home": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"city": {"type": "string"}}}]}}})";

template <class M>
void measure(const char* what, const std::shared_ptr<const TokenTrie>& trie, const Tokenizer& tok, int32_t eos,
             const std::function<M()>& fresh, const std::vector<std::pair<const char*, const char*>>& states,
             int draws) {
  auto masks = std::make_shared<MaskSet<M>>(trie);
  std::vector<float> logits(size_t(trie->n_vocab()));
  std::printf("  %s\n", what);
  for (const auto& [name, text] : states) {
    M m = fresh();
    if (!m.feed(std::string_view(text))) {
      std::printf("    %-20s (refused: %s)\n", name, text);
      continue;
    }
    const auto tw = Clock::now();
    const auto bits = masks->allowed(m);
    const double walk_ms = ms_since(tw);
    size_t n_allowed = 0;
    for (uint64_t w : *bits) n_allowed += size_t(__builtin_popcountll(w));
    const MachineConstraint<M> c(masks, m);
    constexpr int kReps = 200;
    const auto tm = Clock::now();
    for (int r = 0; r < kReps; ++r) c.mask(logits);
    std::printf("    %-20s walk %8.3f ms  kept mask %6.1f us  allowed %6zu of %d\n", name, walk_ms,
                ms_since(tm) * 1e3 / kReps, n_allowed, trie->n_vocab());
  }
  // Random draws: mask, Gumbel-max draw, accept.
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<double> uni(1e-12, 1.0);
  std::vector<float> bias(logits.size(), 0.0f);
  for (const char* s : {"\"", "}", "]", "\"}", "\",", "}}"})
    for (int32_t id : tok.encode(s, false)) bias[size_t(id)] = 3.0f;
  bias[size_t(eos)] = 5.0f;
  int64_t tokens = 0, ended = 0;
  double mask_ms = 0;
  const int64_t walks0 = masks->n_walks(), hits0 = masks->n_hits();
  for (int d = 0; d < draws; ++d) {
    MachineConstraint<M> c(masks, fresh());
    for (int t = 0; t < 400; ++t) {
      for (size_t i = 0; i < logits.size(); ++i) logits[i] = normal(rng) + bias[i];
      const auto tb = Clock::now();
      c.mask(logits);
      mask_ms += ms_since(tb);
      int32_t best = 0;
      double best_v = -INFINITY;
      for (size_t i = 0; i < logits.size(); ++i)
        if (!std::isinf(logits[i])) {
          const double g = double(logits[i]) - std::log(-std::log(uni(rng)));
          if (g > best_v) best_v = g, best = int32_t(i);
        }
      c.accept(best);
      ++tokens;
      if (best == eos) {
        ++ended;
        break;
      }
    }
  }
  std::printf("    draws: %d, %lld tokens, %lld ended with EOS; mask %.3f ms a token (%lld walks, %lld kept masks)\n",
              draws, (long long)tokens, (long long)ended, mask_ms / double(std::max<int64_t>(tokens, 1)),
              (long long)(masks->n_walks() - walks0), (long long)(masks->n_hits() - hits0));
}

void bench(const std::string& dir, int draws) {
  const auto t0 = Clock::now();
  std::unique_ptr<Tokenizer> tok = Tokenizer::from_dir(dir);
  ConstraintVocab v;
  v.bytes.resize(size_t(tok->n_vocab()));
  for (int32_t id = 0; id < tok->n_vocab(); ++id)
    if (!tok->is_special(id)) v.bytes[size_t(id)] = tok->token_bytes(id);
  const int32_t eos = tok->eos_id().value_or(0);
  v.eos.push_back(eos);
  const double load_ms = ms_since(t0);
  const auto t1 = Clock::now();
  auto trie = std::make_shared<const TokenTrie>(v);
  std::printf("%s: %d ids, tokenizer %.0f ms, trie %.1f ms (%zu nodes)\n", dir.c_str(), trie->n_vocab(), load_ms,
              ms_since(t1), trie->n_nodes());
  measure<JsonMachine>(
      "JSON object", trie, *tok, eos, [] { return JsonMachine{}; },
      {{"start", ""}, {"after {", "{"}, {"in a key", "{\"na"}, {"after :", "{\"name\":"},
       {"in a string value", "{\"name\": \"Ada"}, {"in a number", "{\"n\": 12"}, {"after a value", "{\"n\": 12,"},
       {"complete", "{\"n\": 12}"}},
      draws);
  const JsonSchema schema = compile_json_schema(kSchema);
  measure<SchemaMachine>(
      "schema (bench/json_mask_bench.cpp kSchema)", trie, *tok, eos, [&] { return SchemaMachine(schema); },
      {{"start", ""}, {"after {", "{"}, {"in a key", "{\"na"}, {"in a string value", "{\"name\": \"Ada"},
       {"in an integer", "{\"name\": \"Ada\", \"age\": 4"}, {"in an enum", "{\"name\": \"Ada\", \"age\": 4, \"role\": \"a"},
       {"anyOf", "{\"name\": \"Ada\", \"age\": 4, \"role\": \"user\", \"tags\": [], \"home\": "},
       {"complete", "{\"name\":\"A\",\"age\":4,\"role\":\"user\",\"tags\":[],\"home\":null}"}},
      draws);
}

}  // namespace
}  // namespace tf

int main(int argc, char** argv) {
  std::vector<std::string> dirs;
  int draws = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--draws" && i + 1 < argc) {
      draws = std::atoi(argv[++i]);
    } else if (a == "--help" || a == "-h" || a.rfind("--", 0) == 0) {
      std::printf("usage: %s TOKENIZER_DIR... [--draws N]\n", argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    } else {
      dirs.push_back(a);
    }
  }
  if (dirs.empty()) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR... [--draws N]\n", argv[0]);
    return 2;
  }
  try {
    for (const std::string& d : dirs) tf::bench(d, draws);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_json_mask: %s\n", e.what());
    return 1;
  }
  return 0;
}
