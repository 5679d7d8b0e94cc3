// Quantized tiny-main end to end: `twofold quantize` (round-to-nearest) writes a folder whose
// logits equal quantizing at load (--quantization), for int8, int4 and fp8, and stay within the
// quantization error of the 16-bit logits; the batching engine gives every request the ids it
// gets alone; AWQ and GPTQ do no worse than RTN on the calibration rows; a broken quantized
// folder is refused naming the file and tensor; several copies of the linear weights switch at
// the crossover.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "convert/quantize_model.h"
#include "core/error.h"
#include "model/arch/model.h"
#include "model/arch/registry.h"
#include "model/safetensors.h"
#include "model/tokenizer/tokenizer.h"
#include "quant/quantized_weight.h"
#include "model/write_safetensors.h"
#include "convert/step_logits.h"
#include "convert/tiny_inputs.h"
#include "engine/golden_util.h"
#include "test_util.h"
#include "twofold/engine.h"

namespace tf {
namespace {

using test::rel_l2;

namespace fs = std::filesystem;
const std::string kTiny = test::model_dir("tiny-main");

std::vector<float> last_logits(Engine& e, const std::vector<int32_t>& ids) { return e.score(ids, false); }

class QuantizeModel : public test::TempDirTest {
 protected:
  std::string quantize(DType format, const std::string& method = "rtn", const std::vector<int32_t>& calib = {}) {
    const std::string out = (dir_ / std::string(quant_format_name(format))).string() + "-" + method;
    last_ = quantize_model(QuantizeParams{.in_dir = kTiny, .out_dir = out, .format = format, .method = method,
                                          .calib_ids = calib, .calib_rows = 256, .sensitivity = false});
    return out;
  }
  QuantizeReport last_;
};

// The bound on each format's error on tiny-main's last-position logits (rel L2 against the
// 16-bit logits, every prompt), above the largest measured over the three prompts on the CPU
// backend (its integer kernels quantize activation rows too): int8 0.020, fp8 0.041, int4 0.142
// (the test prints each).
struct FormatCase {
  DType format;
  const char* name;
  double max_rel_err;
};

TEST_F(QuantizeModel, WrittenFolderEqualsQuantizingAtLoadAndStaysCloseToSixteenBit) {
  Engine dense(EngineOptions{.model_dir = kTiny, .max_seqs = 4});
  for (const FormatCase c : {FormatCase{DType::W8, "int8", 0.03}, FormatCase{DType::FP8, "fp8", 0.08},
                             FormatCase{DType::W4, "int4", 0.2}}) {
    SCOPED_TRACE(c.name);
    const std::string dir = quantize(c.format);
    const ModelConfig cfg = load_model_config(dir);
    EXPECT_EQ(cfg.quant.format, c.format);
    Engine stored(EngineOptions{.model_dir = dir, .max_seqs = 4});
    Engine at_load(EngineOptions{.model_dir = kTiny, .weights = {.quantization = c.name}, .max_seqs = 4});
    for (const auto& p : test::tiny_prompts()) {
      const std::vector<float> s = last_logits(stored, p), l = last_logits(at_load, p), d = last_logits(dense, p);
      EXPECT_EQ(s, l) << "the written folder and quantizing at load round alike";
      const double err = rel_l2(s, d);
      std::printf("%s: logits rel L2 error %.4f\n", c.name, err);
      EXPECT_GT(err, 0.0);
      EXPECT_LT(err, c.max_rel_err);
    }
    // greedy decoding through the batching engine: deterministic, and batched equals alone
    Engine alone(EngineOptions{.model_dir = dir, .max_seqs = 1});
    Engine batched(EngineOptions{.model_dir = dir, .max_seqs = 8});
    const auto a = test::tiny_greedy_ids(alone, /*one_at_a_time=*/true);
    EXPECT_EQ(a, test::tiny_greedy_ids(batched, /*one_at_a_time=*/false));
    EXPECT_EQ(a, test::tiny_greedy_ids(alone, /*one_at_a_time=*/true));
  }
}

TEST_F(QuantizeModel, CalibratedMethodsDoNoWorseThanRtnOnTheCalibrationRows) {
  Engine e(EngineOptions{.model_dir = kTiny, .max_seqs = 1});
  const std::vector<int32_t> calib = test::tiny_calib_ids(512);
  quantize(DType::W4, "rtn", calib);
  const QuantizeReport rtn = last_;
  for (const std::string method : {"awq", "gptq"}) {
    SCOPED_TRACE(method);
    const std::string dir = quantize(DType::W4, method, calib);
    ASSERT_EQ(last_.weights.size(), rtn.weights.size());
    double sum_rtn = 0, sum = 0;
    for (size_t i = 0; i < rtn.weights.size(); ++i) {
      ASSERT_GE(last_.weights[i].output_error, 0.0) << last_.weights[i].name;
      sum_rtn += rtn.weights[i].output_error;
      sum += last_.weights[i].output_error;
    }
    EXPECT_LT(sum, sum_rtn);
    // The written folder loads and its logits stay within int4's error (measured rel L2 on this
    // prompt: RTN below 0.15, AWQ below 0.15, GPTQ 0.161 with these 512 calibration tokens).
    Engine q(EngineOptions{.model_dir = dir, .max_seqs = 1});
    const std::vector<float> l = q.score(test::tiny_prompts()[0], false);
    EXPECT_LT(rel_l2(l, e.score(test::tiny_prompts()[0], false)), 0.25);
  }
}

// Loader refusals: the folder is a valid int4 one with one thing broken.
class QuantizedFolderErrors : public QuantizeModel {
 protected:
  void SetUp() override {
    QuantizeModel::SetUp();
    good_ = quantize(DType::W4);
    const SafetensorsFile f(good_ + "/model.safetensors");
    for (const auto& [name, t] : f.tensors()) {
      tensors_.push_back({.name = name, .dtype = t.dtype, .shape = t.shape, .data = t.data, .nbytes = t.nbytes});
      bytes_.emplace_back(t.data, t.data + t.nbytes);
      tensors_.back().data = bytes_.back().data();
    }
    config_ = test::load_json(good_ + "/config.json");
  }
  // Writes the folder with `edit` applied to the tensors and `cfg` as config; the load error.
  std::string load_error(const std::function<void(std::vector<TensorToWrite>&)>& edit, const nlohmann::json& cfg) {
    const std::string bad = (dir_ / "bad").string();
    fs::create_directories(bad);
    for (const auto& e : fs::directory_iterator(good_))
      if (e.path().filename() != "model.safetensors" && e.path().filename() != "config.json")
        fs::copy_file(e.path(), bad / e.path().filename(), fs::copy_options::overwrite_existing);
    std::vector<TensorToWrite> t = tensors_;
    edit(t);
    write_safetensors(bad + "/model.safetensors", t);
    std::ofstream(bad + "/config.json") << cfg.dump(2);
    return test::error_of([&] { Engine e(EngineOptions{.model_dir = bad}); });
  }
  TensorToWrite& find(std::vector<TensorToWrite>& t, const std::string& name) {
    for (TensorToWrite& x : t)
      if (x.name == name) return x;
    throw std::runtime_error("no tensor " + name);
  }
  std::string good_;
  std::vector<TensorToWrite> tensors_;
  std::vector<std::vector<uint8_t>> bytes_;
  nlohmann::json config_;
};

TEST_F(QuantizedFolderErrors, GoodFolderLoads) {
  Engine e(EngineOptions{.model_dir = good_});
  EXPECT_EQ(e.config().quant.format, DType::W4);
}

TEST_F(QuantizedFolderErrors, UnknownFormat) {
  nlohmann::json c = config_;
  c["quantization_config"]["format"] = "int3";
  const std::string msg = load_error([](auto&) {}, c);
  EXPECT_CONTAINS(msg, "config.json");
  EXPECT_CONTAINS(msg, "quantization_config.format");
}

TEST_F(QuantizedFolderErrors, GroupSizeThatDoesNotDivideTheInputDimension) {
  nlohmann::json c = config_;
  c["quantization_config"]["group_size"] = 96;  // q/k/v, o, gate/up have 256 inputs
  c["quantization_config"].erase("group_size_overrides");
  const std::string msg = load_error([](auto&) {}, c);
  EXPECT_CONTAINS(msg, "group size 96 does not divide the input dimension 256");
}

TEST_F(QuantizedFolderErrors, ScalesOfTheWrongShape) {
  const std::string msg = load_error(
      [&](std::vector<TensorToWrite>& t) {
        TensorToWrite& s = find(t, "model.layers.2.self_attn.o_proj.scales");
        s.shape = {s.shape[0] / 2, s.shape[1] * 2};
      },
      config_);
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "model.layers.2.self_attn.o_proj.scales");
  EXPECT_CONTAINS(msg, "one per group of 128");
}

TEST_F(QuantizedFolderErrors, PackedInt4SizeThatDoesNotMatchItsShape) {
  const std::string msg = load_error(
      [&](std::vector<TensorToWrite>& t) {
        TensorToWrite& q = find(t, "model.layers.1.mlp.up_proj.qweight");
        q.shape = {q.shape[0], q.shape[1] * 2};  // unpacked: one code per byte
        q.nbytes *= 2;
        bytes_.emplace_back(q.nbytes);
        q.data = bytes_.back().data();
      },
      config_);
  EXPECT_CONTAINS(msg, "model.layers.1.mlp.up_proj.qweight");
  EXPECT_CONTAINS(msg, "two 4-bit codes per byte");
}

TEST_F(QuantizedFolderErrors, MissingScales) {
  const std::string msg = load_error(
      [&](std::vector<TensorToWrite>& t) {
        std::erase_if(t, [](const TensorToWrite& x) { return x.name == "model.layers.0.mlp.down_proj.zeros"; });
      },
      config_);
  EXPECT_CONTAINS(msg, "model.layers.0.mlp.down_proj.zeros");
  EXPECT_CONTAINS(msg, "missing");
}

// A decode step reads every weight whole except the token embedding, of which it gathers a row
// a token: the untied tiny-main's step leaves its table out, the tied tiny-draft's counts it
// (its LM head is that table).
TEST(WeightCopies, StepBytesLeaveOutAGatheredEmbedding) {
  for (const char* name : {"tiny-main", "tiny-draft"}) {
    SCOPED_TRACE(name);
    auto be = make_backend(BackendKind::Cpu);
    auto model = load_model(test::model_dir(name), *be, LoadOptions{.weight_dtype = DType::BF16});
    const ModelConfig& cfg = model->config();
    const int64_t table = cfg.n_vocab * cfg.d_model * 2;
    EXPECT_EQ(model->weight_bytes() - model->step_weight_bytes(1), cfg.tie_word_embeddings ? 0 : table);
  }
}

// Two copies: int4 for steps of 1-3 tokens, bf16 from 4. Each step's logits are those of the
// model holding only the copy its size picks.
TEST(WeightCopies, EachStepUsesTheCopyOfItsSize) {
  auto be = make_backend(BackendKind::Cpu);
  const LoadOptions two{.weight_copies = {WeightCopy{.kind = WeightCopy::Kind::Quantized, .format = DType::W4},
                                          WeightCopy{.kind = WeightCopy::Kind::Dense16, .min_tokens = 4}}};
  auto model = load_model(kTiny, *be, two);
  ASSERT_EQ(model->weight_copies().size(), 2u);
  EXPECT_EQ(model->weight_copies()[0].name, "int4 g128");
  EXPECT_EQ(model->weight_copies()[1].name, "bf16");
  EXPECT_LT(model->weight_copies()[0].bytes, model->weight_copies()[1].bytes / 3);
  EXPECT_LT(model->step_weight_bytes(1), model->step_weight_bytes(4));
  auto be_q = make_backend(BackendKind::Cpu), be_d = make_backend(BackendKind::Cpu);
  auto only_q = load_model(kTiny, *be_q, LoadOptions{.weight_copies = {two.weight_copies[0]}});
  WeightCopy d = two.weight_copies[1];
  d.min_tokens = 1;
  auto only_d = load_model(kTiny, *be_d, LoadOptions{.weight_copies = {d}});
  const ModelConfig& cfg = model->config();
  const KvCacheSpec kv{.n_layers = cfg.n_layers, .n_blocks = 4, .block_size = 16, .n_kv_heads = cfg.n_kv_heads,
                       .head_dim = cfg.head_dim, .dtype = DType::F32};
  model->init_kv_cache(*be, kv);
  only_q->init_kv_cache(*be_q, kv);
  only_d->init_kv_cache(*be_d, kv);
  const std::vector<int32_t> ids = {0, 450, 365, 5, 27, 99};
  for (int32_t n : {1, 3, 4, 6}) {
    SCOPED_TRACE(n);
    auto forward = [&](Model& m, Backend& b) { return test::step_logits(m, b, ids, n); };
    const auto [copy, logits] = forward(*model, *be);
    EXPECT_EQ(copy, n < 4 ? 0 : 1);
    EXPECT_EQ(logits, (n < 4 ? forward(*only_q, *be_q) : forward(*only_d, *be_d)).second);
  }
  // a policy set later moves the crossover
  model->set_copy_ranges({{.min_tokens = 1, .copy = 0}, {.min_tokens = 2, .copy = 1}});
  const int32_t blocks[1] = {0};
  BatchBuilder bb(16, 1);
  bb.add(SeqChunk{.ids = ids.data(), .n_ids = 3, .start_pos = 0, .blocks = blocks, .n_blocks = 1});
  EXPECT_EQ(model->prepare(bb.take()).weight_copy, 1);
}

TEST(WeightCopies, EnginePerBatchOptionAndItsErrors) {
  Engine e(EngineOptions{.model_dir = kTiny, .weights = {.per_batch = "int8:1,bf16:16"}, .max_seqs = 4});
  EXPECT_EQ(e.weight_copy_names(), (std::vector<std::string>{"int8", "bf16"}));
  EXPECT_CONTAINS(test::error_of([] { Engine x(EngineOptions{.model_dir = kTiny, .weights = {.per_batch = "int8:2,bf16:16"}}); }),
                  "--weights-per-batch");
  EXPECT_CONTAINS(test::error_of([] { Engine x(EngineOptions{.model_dir = kTiny, .weights = {.per_batch = "int5"}}); }),
                  "unknown copy 'int5'");
}

}  // namespace
}  // namespace tf
