// tiny-main and tiny-draft as llama.cpp converted them (models/gguf: f16, q8_0, q4_0) against
// the Hugging Face folders and transformers' golden vectors, through the same Engine as
// `twofold generate`: the same config and prompt ids; logits of the f16 file within 1e-4 of
// the folder's and the same greedy ids; the quantized files within their measured quantization
// error and with the f16 file's greedy ids wherever that error cannot decide the choice.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <tuple>

#include "engine/golden_util.h"
#include "model/arch/registry.h"
#include "model/tokenizer/tokenizer.h"
#include "sample/sampler.h"
#include "twofold/engine.h"

namespace tf {
namespace {

std::string unpacked(const std::string& name) { return std::string(TF_GGUF_MODELS_DIR) + "/" + name; }
std::string bundled(const std::string& name) { return test::source_path("models/gguf/" + name); }

// The F32 forward over stored weights; 1e-4 relative L2 is the bound the folder itself meets
// against transformers (tests/engine/test_golden.cpp).
constexpr double kLogitTol = 1e-4;
constexpr double kTieTol = 1e-3;
// Quantization error, measured on these files (cpu backend), as the root-mean-square
// difference from the f16 file's logits at the same position, worst over every greedy step of
// the golden prompts: q8_0 0.051, q4_0 0.78 (4-bit weights move an 8M-parameter model's logits
// a lot); as the relative L2 distance of the prompts' last logits: q8_0 0.0086, q4_0 0.194.
// Bounds with about 1.25x room.
constexpr double kQ8RmsTol = 0.065;
constexpr double kQ4RmsTol = 1.0;
constexpr double kQ8Tol = 0.011;
constexpr double kQ4Tol = 0.25;
// The same files in their blocks on the CPU backend's integer kernels, which also quantize the
// activations to INT8 per block of 32 (rounding error up to max|x| / 254 per element). Measured
// (AVX-512 VNNI): against the f16 file, rms 0.0746 / relative L2 0.0143 (q8_0) and 0.788 /
// 0.196 (q4_0, within the bounds above); against the same file dequantized, relative L2 0.0105
// (q8_0) and 0.0107 (q4_0). Bounds with about 1.25-1.4x room.
constexpr double kQ8BlocksRmsTol = 0.095;
constexpr double kQ8BlocksTol = 0.018;
constexpr double kKernelTol = 0.015;

struct Outputs {
  std::vector<std::vector<int32_t>> prompt_ids;
  std::vector<std::vector<float>> last_logits;  // [n_prompts][n_vocab]
  std::vector<std::vector<int32_t>> greedy;     // generated, [n_prompts][steps]
  // The logits at each greedy step of the scored continuation (the model's own, or the one it
  // was forced along), [n_prompts][step][n_vocab], and their top-2 margins.
  std::vector<std::vector<std::vector<float>>> step_logits;
  std::vector<std::vector<double>> step_margins;
};

// Runs the golden prompts: tokenizes their text, generates their greedy continuation, and
// scores prompt + continuation, its own or (teacher forcing) `forced`'s.
// `dequantize`: the quantized matrices dequantized to F32 at load (--dequantize) instead of run
// on the CPU backend's integer kernels.
Outputs run(const std::string& model, const std::vector<test::GoldenPrompt>& golden, const Outputs* forced = nullptr,
            bool dequantize = false) {
  Engine e(EngineOptions{.model_dir = model, .weights = {.dequantize_gguf = dequantize}, .max_seqs = 4});
  const size_t n_vocab = size_t(e.config().n_vocab);
  Outputs o;
  for (size_t ip = 0; ip < golden.size(); ++ip) {
    const test::GoldenPrompt& g = golden[ip];
    o.prompt_ids.push_back(e.tokenizer().encode(g.text));
    const RequestId id = e.add_request(
        {.prompt_ids = g.input_ids,
         .sampling = {.temperature = 0, .max_tokens = int32_t(g.greedy_ids.size()), .ignore_eos = true}});
    while (e.has_unfinished()) e.step();
    o.greedy.push_back(e.output_ids(id));
    e.release(id);
    const std::vector<int32_t>& cont = forced ? forced->greedy[ip] : o.greedy.back();
    std::vector<int32_t> seq = g.input_ids;
    seq.insert(seq.end(), cont.begin(), cont.end() - 1);
    const std::vector<float> all = e.score(seq, /*all_positions=*/true);
    const size_t first = g.input_ids.size() - 1;
    o.last_logits.emplace_back(all.begin() + long(first * n_vocab), all.begin() + long((first + 1) * n_vocab));
    std::vector<std::vector<float>> rows;
    std::vector<double> margins;
    for (size_t i = 0; i < cont.size(); ++i) {
      rows.emplace_back(all.begin() + long((first + i) * n_vocab), all.begin() + long((first + i + 1) * n_vocab));
      std::vector<float> sorted = rows.back();
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      margins.push_back(double(sorted[0]) - double(sorted[1]));
    }
    o.step_logits.push_back(std::move(rows));
    o.step_margins.push_back(std::move(margins));
  }
  return o;
}

class TinyMainGguf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    golden_ = new std::vector<test::GoldenPrompt>(test::load_golden("tiny-main"));
    folder_ = new Outputs(run(test::model_dir("tiny-main"), *golden_));
    f16_ = new Outputs(run(unpacked("tiny-main-f16.gguf"), *golden_));
  }
  static void TearDownTestSuite() {
    delete golden_;
    delete folder_;
    delete f16_;
  }
  // Relative L2 distance of each prompt's last logits from `ref`'s; prints the worst.
  static double worst_rel_l2(const Outputs& o, const Outputs& ref, const char* what) {
    double worst = 0;
    for (size_t i = 0; i < o.last_logits.size(); ++i)
      worst = std::max(worst, test::rel_l2(o.last_logits[i].data(), ref.last_logits[i].data(), ref.last_logits[i].size()));
    std::printf("[ measured ] %s: worst relative L2 of the last logits %.3g\n", what, worst);
    return worst;
  }
  // Generated greedy ids equal to `ref`'s up to each prompt's first step where ref's top-2
  // margin is below tie_tol (from there on either token is a fair pick, and the sequences may
  // part). Prints how many steps that compared.
  static void expect_same_greedy(const Outputs& o, const Outputs& ref, double tie_tol, const char* what) {
    size_t compared = 0, total = 0;
    for (size_t i = 0; i < o.greedy.size(); ++i) {
      size_t n = 0;
      while (n < ref.greedy[i].size() && ref.step_margins[i][n] >= tie_tol) ++n;
      for (size_t s = 0; s < n; ++s) ASSERT_EQ(o.greedy[i][s], ref.greedy[i][s]) << what << ", prompt " << i << ", step " << s;
      compared += n;
      total += ref.greedy[i].size();
    }
    std::printf("[ measured ] %s: generated ids equal for %zu of %zu greedy steps (each prompt up to its first "
                "top-2 margin below %.3g)\n", what, compared, total, tie_tol);
  }
  // Teacher forcing: `o` scored along ref's continuations. At every step where ref's top-2
  // margin is at least tie_tol, o's most likely token must be ref's greedy id. Returns the
  // worst root-mean-square logit difference over all steps.
  static double expect_same_choices(const Outputs& o, const Outputs& ref, double tie_tol, const char* what) {
    size_t compared = 0, total = 0;
    double worst_rms = 0;
    for (size_t i = 0; i < ref.greedy.size(); ++i) {
      for (size_t s = 0; s < ref.greedy[i].size(); ++s) {
        const std::vector<float>& a = o.step_logits[i][s];
        const std::vector<float>& b = ref.step_logits[i][s];
        double sum = 0;
        for (size_t v = 0; v < a.size(); ++v) sum += (double(a[v]) - double(b[v])) * (double(a[v]) - double(b[v]));
        worst_rms = std::max(worst_rms, std::sqrt(sum / double(a.size())));
        ++total;
        if (ref.step_margins[i][s] < tie_tol) continue;
        ++compared;
        EXPECT_EQ(argmax(a), ref.greedy[i][s]) << what << ", prompt " << i << ", step " << s;
      }
    }
    std::printf("[ measured ] %s: rms logit difference %.3g (worst step); the same choice at all %zu of %zu "
                "greedy steps whose top-2 margin is at least %.3g\n", what, worst_rms, compared, total, tie_tol);
    return worst_rms;
  }
  static std::vector<test::GoldenPrompt>* golden_;
  static Outputs* folder_;
  static Outputs* f16_;
};
std::vector<test::GoldenPrompt>* TinyMainGguf::golden_ = nullptr;
Outputs* TinyMainGguf::folder_ = nullptr;
Outputs* TinyMainGguf::f16_ = nullptr;

TEST_F(TinyMainGguf, ConfigEqualsTheFolders) {
  const ModelConfig a = load_model_config(test::model_dir("tiny-main"));
  for (const std::string& path : {unpacked("tiny-main-f16.gguf"), bundled("tiny-main-q8_0.gguf"), bundled("tiny-main-q4_0.gguf")}) {
    SCOPED_TRACE(path);
    const ModelConfig b = load_model_config(path);
    EXPECT_EQ(b.model_type, a.model_type);
    EXPECT_EQ(b.d_model, a.d_model);
    EXPECT_EQ(b.d_ff, a.d_ff);
    EXPECT_EQ(b.n_layers, a.n_layers);
    EXPECT_EQ(b.n_heads, a.n_heads);
    EXPECT_EQ(b.n_kv_heads, a.n_kv_heads);
    EXPECT_EQ(b.head_dim, a.head_dim);
    EXPECT_EQ(b.n_vocab, a.n_vocab);
    EXPECT_EQ(b.max_position, a.max_position);
    EXPECT_EQ(b.rms_norm_eps, a.rms_norm_eps);
    EXPECT_EQ(b.rope_theta, a.rope_theta);
    EXPECT_EQ(b.tie_word_embeddings, a.tie_word_embeddings);
    EXPECT_EQ(b.attention_bias, a.attention_bias);
    EXPECT_EQ(b.bos_id, a.bos_id);
    EXPECT_EQ(b.eos_ids, a.eos_ids);
  }
}

TEST_F(TinyMainGguf, PromptIdsEqualTheFolders) {
  for (const std::string& path : {unpacked("tiny-main-f16.gguf"), bundled("tiny-main-q4_0.gguf")}) {
    const auto tok = Tokenizer::from_model(path);
    const auto ref = Tokenizer::from_model(test::model_dir("tiny-main"));
    for (const test::GoldenPrompt& g : *golden_) {
      EXPECT_EQ(tok->encode(g.text), g.input_ids) << path << ": " << g.name;
      EXPECT_EQ(tok->decode(g.input_ids), ref->decode(g.input_ids)) << g.name;
    }
    // Special tokens in the text, and what add_special adds (nothing: add_bos_token is false).
    EXPECT_EQ(tok->encode("a<|eos|>b"), ref->encode("a<|eos|>b"));
    EXPECT_EQ(tok->encode("x", /*add_special=*/true), ref->encode("x", true));
    EXPECT_EQ(tok->bos_id(), ref->bos_id());
    EXPECT_EQ(tok->eos_id(), ref->eos_id());
    EXPECT_EQ(tok->n_vocab(), ref->n_vocab());
  }
  for (size_t i = 0; i < golden_->size(); ++i) EXPECT_EQ(f16_->prompt_ids[i], (*golden_)[i].input_ids);
}

TEST_F(TinyMainGguf, F16LogitsEqualTheFolderAndTransformers) {
  EXPECT_LE(worst_rel_l2(*f16_, *folder_, "f16 file vs folder"), kLogitTol);
  double worst = 0;
  for (size_t i = 0; i < golden_->size(); ++i) {
    const auto& g = (*golden_)[i];
    worst = std::max(worst, test::rel_l2(f16_->last_logits[i].data(), g.last_logits.data(), g.last_logits.size()));
  }
  std::printf("[ measured ] f16 file vs transformers: worst relative L2 %.3g\n", worst);
  EXPECT_LE(worst, kLogitTol);
  expect_same_greedy(*f16_, *folder_, kTieTol, "f16 file vs folder");
}

// The quantized files scored along the f16 file's greedy continuations, as the CPU backend runs
// them by default (their Q8_0 / Q4_0 matrices in their blocks on the integer kernels; q4_0's
// Q6_K LM head too) and dequantized at load (--dequantize). A step whose f16 top-2
// margin is within 3x the quantization error (rms logit difference) is a near-tie: either
// token is a fair pick there, and the generated sequences may part after it. The last logits
// are also held to transformers' golden ones (which the f16 file meets within 1e-4), and the
// two paths to each other within the error of the kernels' INT8 activations (kKernelTol).
// Each path has its bounds (the in-blocks q8_0 path adds the activations' rounding to the
// weights').
TEST_F(TinyMainGguf, QuantizedFilesWithinTheirError) {
  struct Bounds {
    double rms, l2;
  };
  for (const auto& [file, blocks, dequantized] :
       {std::tuple{"tiny-main-q8_0.gguf", Bounds{kQ8BlocksRmsTol, kQ8BlocksTol}, Bounds{kQ8RmsTol, kQ8Tol}},
        std::tuple{"tiny-main-q4_0.gguf", Bounds{kQ4RmsTol, kQ4Tol}, Bounds{kQ4RmsTol, kQ4Tol}}}) {
    SCOPED_TRACE(file);
    std::vector<Outputs> paths;
    for (bool dequantize : {false, true}) {
      const double rms_tol = dequantize ? dequantized.rms : blocks.rms, l2_tol = dequantize ? dequantized.l2 : blocks.l2;
      const Outputs q = run(bundled(file), *golden_, /*forced=*/f16_, dequantize);
      for (size_t i = 0; i < golden_->size(); ++i) EXPECT_EQ(q.prompt_ids[i], (*golden_)[i].input_ids);
      const std::string what = std::string(file) + (dequantize ? " dequantized" : " in blocks");
      EXPECT_LE(worst_rel_l2(q, *f16_, (what + " vs f16 file").c_str()), l2_tol);
      double worst = 0;
      for (size_t i = 0; i < golden_->size(); ++i) {
        const auto& g = (*golden_)[i];
        worst = std::max(worst, test::rel_l2(q.last_logits[i].data(), g.last_logits.data(), g.last_logits.size()));
      }
      std::printf("[ measured ] %s vs transformers: worst relative L2 %.3g\n", what.c_str(), worst);
      EXPECT_LE(worst, l2_tol);
      EXPECT_LE(expect_same_choices(q, *f16_, 3 * rms_tol, (what + " vs f16 file").c_str()), rms_tol);
      expect_same_greedy(q, *f16_, 3 * rms_tol, (what + " vs f16 file").c_str());
      paths.push_back(q);
    }
    EXPECT_LE(worst_rel_l2(paths[0], paths[1], (std::string(file) + " in blocks vs dequantized").c_str()), kKernelTol);
  }
}

// The reference backend reads every block type in place (a row dequantized when an op needs
// it), with the same F32 values as dequantization at load: loading in blocks (Q/K rows moved
// as whole blocks, the embedding and LM head in blocks) must then give the same logits bit
// for bit as --dequantize.
TEST(TinyMainGgufRef, InBlocksEqualsDequantizedBitForBit) {
  const test::GoldenPrompt g = test::load_golden("tiny-main").front();
  for (const char* file : {"tiny-main-q8_0.gguf", "tiny-main-q4_0.gguf"}) {
    std::vector<std::vector<float>> logits;
    for (bool dequantize : {false, true}) {
      Engine e(EngineOptions{.model_dir = bundled(file), .backend = "ref", .weights = {.dequantize_gguf = dequantize},
                             .max_seqs = 1});
      logits.push_back(e.score(g.input_ids, /*all_positions=*/false));
    }
    ASSERT_EQ(logits[0].size(), logits[1].size());
    EXPECT_EQ(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)), 0) << file;
  }
}

// tiny-draft's GGUF has no output.weight: the embeddings are tied.
TEST(TinyDraftGguf, TiedEmbeddingsMatchTransformers) {
  const std::string path = unpacked("tiny-draft-f16.gguf");
  EXPECT_TRUE(load_model_config(path).tie_word_embeddings);
  Engine e(EngineOptions{.model_dir = path, .max_seqs = 2});
  const size_t n_vocab = size_t(e.config().n_vocab);
  for (const test::GoldenPrompt& g : test::load_golden("tiny-draft")) {
    EXPECT_EQ(e.tokenizer().encode(g.text), g.input_ids) << g.name;
    const std::vector<float> last = e.score(g.input_ids, /*all_positions=*/false);
    ASSERT_EQ(last.size(), n_vocab);
    EXPECT_LE(test::rel_l2(last.data(), g.last_logits.data(), n_vocab), kLogitTol) << g.name;
  }
}

// A folder holding one .gguf file and no safetensors is that file.
class GgufFolder : public test::TempDirTest {};

TEST_F(GgufFolder, LoadsLikeTheFile) {
  std::filesystem::create_symlink(std::filesystem::absolute(bundled("tiny-main-q8_0.gguf")), dir_ / "model.gguf");
  Engine e(EngineOptions{.model_dir = dir_.string(), .max_seqs = 1});
  const auto g = test::load_golden("tiny-main").front();
  EXPECT_EQ(e.tokenizer().encode(g.text), g.input_ids);
  EXPECT_EQ(e.config().n_layers, 6);
}

}  // namespace
}  // namespace tf
