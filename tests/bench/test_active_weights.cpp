// The bench's bytes a decode step reads (bench/active_weights.h) against the model's own count.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "bench/active_weights.h"
#include "model/arch/model.h"
#include "model/arch/registry.h"
#include "test_util.h"

namespace tf {
namespace {

// A batch that reads every expert of the untied Mixtral parity model reads what the model says
// a step reads (its embedding table left out); one token reads only its top-k experts.
TEST(StepWeightBytes, EveryExpertReadIsTheModelsStepBytes) {
  auto be = make_backend(BackendKind::Cpu);
  auto model = load_model(test::model_dir("parity/mixtral"), *be, LoadOptions{.weight_dtype = DType::BF16});
  const ModelConfig& cfg = model->config();
  ASSERT_FALSE(cfg.tie_word_embeddings);
  ASSERT_GT(cfg.n_experts, cfg.n_experts_per_tok);
  const double w = double(model->step_weight_bytes(1)), n = double(model->n_params());
  EXPECT_NEAR(bench::step_weight_bytes(cfg, w, n, 1 << 20), w, 1e-9 * w);
  const double one = bench::step_weight_bytes(cfg, w, n, 1);
  const bench::ActiveWeights a = bench::active_weights(cfg);
  const double per_param = w / (n - double(cfg.n_vocab) * double(cfg.d_model));
  const double unread = double(a.n_moe_layers) * double(cfg.n_experts - cfg.n_experts_per_tok) * a.expert_params_each;
  EXPECT_NEAR(one, w - unread * per_param, 1e-9 * w);
}

}  // namespace
}  // namespace tf
