// src/quant/capture_backend: tiny-main runs through the decorator on the CPU backend. A spy
// in front of it (the model's own calls, before the decorator changes them) keeps each
// matmul's input and norm weight; the test then runs the ops itself: for every matmul with
// an RMSNorm prologue (q/k/v and gate/up of every layer) the recorded rows must equal
// rms_norm(x) * norm_w computed here in double, and for the others (o, down, the LM head)
// they must be x itself, bit for bit. The decorator must not change the logits (bitwise
// against the plain backend), and it keeps at most max_rows rows per weight.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/op_test_util.h"
#include "model/arch/model.h"
#include "quant/capture_backend.h"
#include "test_util.h"

namespace tf {
namespace {

// The model's matmul calls as it made them: w, a copy of x and of the norm weight.
class Spy : public ForwardingBackend {
 public:
  struct Call {
    const void* w;
    int64_t k;
    std::vector<float> x, norm_w;
    float eps;
    MatmulFusion::Epilogue epi;
  };
  using ForwardingBackend::ForwardingBackend;
  void matmul(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out) override {
    calls.push_back(Call{w.data, x.shape[1], test::to_host_f32(inner(), x), {}, 0.0f, MatmulFusion::Epilogue::Store});
    ForwardingBackend::matmul(x, w, bias, out);
  }
  void matmul_fused(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out,
                    const MatmulFusion& f) override {
    Call c{w.data, x.shape[1], test::to_host_f32(inner(), x), {}, f.eps, f.epilogue};
    if (f.norm_w.data) {
      c.norm_w.resize(size_t(f.norm_w.numel()));
      load_row_f32(f.norm_w.data, f.norm_w.dtype, 0, f.norm_w.numel(), c.norm_w.data());
    }
    calls.push_back(std::move(c));
    ForwardingBackend::matmul_fused(x, w, bias, out, f);
  }
  std::vector<Call> calls;
};

struct Run {
  std::unique_ptr<Model> model;
  std::vector<float> logits;
};

Batch prompt_batch(const std::vector<int32_t>& ids, int32_t start) {
  const int32_t blocks[4] = {0, 1, 2, 3};
  BatchBuilder b(16, 4);
  b.add(SeqChunk{.ids = ids.data(), .n_ids = int32_t(ids.size()), .start_pos = start, .blocks = blocks, .n_blocks = 4});
  return b.take();
}

std::vector<float> run_forward(Model& model, Backend& be, const Batch& batch) {
  const PreparedStep p = model.prepare(batch);
  model.run();
  return test::to_host_f32(be, p.logits);
}

TEST(CaptureBackend, RecordsNormalizedInputsOfTinyMain) {
  const std::string dir = test::model_dir("tiny-main");
  const std::vector<int32_t> ids = {1, 450, 365, 5, 27, 99, 1000, 12, 3, 77, 8, 64};
  const int64_t max_rows = 8;

  auto cpu = make_backend(BackendKind::Cpu);
  CaptureBackend capture(*cpu, CaptureOptions{.max_rows = max_rows});
  Spy spy(capture);
  const auto model = load_model(dir, spy);
  const ModelConfig& cfg = model->config();
  const KvCacheSpec spec{.n_layers = cfg.n_layers, .n_blocks = 8, .block_size = 16, .n_kv_heads = cfg.n_kv_heads,
                         .head_dim = cfg.head_dim, .dtype = DType::F32};
  model->init_kv_cache(spy, spec);
  const std::vector<float> logits = run_forward(*model, spy, prompt_batch(ids, 0));

  // the same forward on the plain backend: the decorator is transparent
  auto plain_be = make_backend(BackendKind::Cpu);
  const auto plain = load_model(dir, *plain_be);
  plain->init_kv_cache(*plain_be, spec);
  EXPECT_TRUE(test::bitwise_equal(logits, run_forward(*plain, *plain_be, prompt_batch(ids, 0))));

  const int64_t n = int64_t(ids.size());
  int n_norm = 0, n_plain = 0;
  for (const Spy::Call& c : spy.calls) {
    const CaptureBackend::Record* r = capture.find(c.w);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->k, c.k);
    const int64_t rows = std::min(int64_t(c.x.size()) / c.k, max_rows);  // the LM head sees 1 row
    ASSERT_EQ(r->n_rows, rows);
    std::vector<float> want(c.x.begin(), c.x.begin() + rows * c.k);
    if (!c.norm_w.empty()) {  // the ops run here: rms_norm(x) * norm_w, in double
      for (int64_t t = 0; t < rows; ++t) {
        double ss = 0;
        for (int64_t j = 0; j < c.k; ++j) ss += double(c.x[size_t(t * c.k + j)]) * c.x[size_t(t * c.k + j)];
        const double inv = 1.0 / std::sqrt(ss / double(c.k) + c.eps);
        for (int64_t j = 0; j < c.k; ++j)
          want[size_t(t * c.k + j)] = float(c.x[size_t(t * c.k + j)] * inv * c.norm_w[size_t(j)]);
      }
      // the CPU backend's F32 norm against the double one: a few F32 roundings
      EXPECT_TRUE(test::close_rel_l2(r->rows, want, 1e-6)) << "weight " << n_norm + n_plain;
      ++n_norm;
    } else {
      EXPECT_TRUE(test::bitwise_equal(r->rows, want));
      ++n_plain;
    }
  }
  // per layer: qkv (RopeKv) and gate/up (Swiglu) with the norm, o and down without; the LM head
  EXPECT_EQ(n_norm, 2 * cfg.n_layers);
  EXPECT_EQ(n_plain, 2 * cfg.n_layers + 1);
  EXPECT_EQ(int64_t(capture.records().size()), 4 * cfg.n_layers + 1);
  EXPECT_EQ(spy.calls.front().epi, MatmulFusion::Epilogue::RopeKv);  // layer 0's q/k/v come first

  // a second step (a decode) is offered but not kept: the budget is spent
  run_forward(*model, spy, prompt_batch({42}, int32_t(n)));
  for (const auto& r : capture.records()) {
    const bool lm_head = r.weight == capture.records().back().weight;  // one logits row per step
    EXPECT_EQ(r.n_rows, lm_head ? 2 : max_rows);
    EXPECT_EQ(r.n_seen, lm_head ? 2 : n + 1);
  }
}

// skip_first leaves out the first rows of every call: two calls of 3 rows with skip_first 1
// keep rows 1 and 2 of each, in order, and count 4 rows offered; a call of fewer rows than
// skip_first offers none.
TEST(CaptureBackend, SkipFirstLeavesOutEachCallsLeadingRows) {
  const int64_t k = 4, m = 2;
  auto cpu = make_backend(BackendKind::Cpu);
  CaptureBackend capture(*cpu, CaptureOptions{.max_rows = 16, .skip_first = 1});
  const TensorView w = test::to_device(*cpu, std::vector<float>(size_t(m * k), 0.5f), m, k);
  const TensorView out = cpu->alloc(DType::F32, {3, m});
  std::vector<float> want;
  for (int call = 0; call < 2; ++call) {
    std::vector<float> x(size_t(3 * k));
    for (size_t e = 0; e < x.size(); ++e) x[e] = float(call * 100 + int(e));
    want.insert(want.end(), x.begin() + k, x.end());
    capture.matmul(test::to_device(*cpu, x, 3, k), w, TensorView{}, out);
  }
  const TensorView one_out = cpu->alloc(DType::F32, {1, m});
  capture.matmul(test::to_device(*cpu, std::vector<float>(size_t(k), 9.0f), 1, k), w, TensorView{}, one_out);
  const CaptureBackend::Record* r = capture.find(w.data);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->n_rows, 4);
  EXPECT_EQ(r->n_seen, 4);
  EXPECT_TRUE(test::bitwise_equal(r->rows, want));
}

}  // namespace
}  // namespace tf
