#include "engine/forward_runner.h"

#include <gtest/gtest.h>

#include <vector>

#include "backend/forwarding_backend.h"
#include "backend/op_test_util.h"
#include "model/arch/model.h"
#include "test_util.h"

namespace tf {
namespace {

// Short contexts get strides of 16 and 32 blocks, longer ones multiples of 64; every stride
// holds the batch's tables, and strides only grow with the context (one recording a bucket).
TEST(GraphBlockStride, FineBucketsThenMultiplesOf64) {
  EXPECT_EQ(graph_block_stride(1), 16);
  EXPECT_EQ(graph_block_stride(16), 16);
  EXPECT_EQ(graph_block_stride(17), 32);
  EXPECT_EQ(graph_block_stride(32), 32);
  EXPECT_EQ(graph_block_stride(33), 64);
  EXPECT_EQ(graph_block_stride(64), 64);
  EXPECT_EQ(graph_block_stride(65), 128);
  EXPECT_EQ(graph_block_stride(257), 320);
  int32_t prev = 0, buckets = 0;
  for (int32_t b = 1; b <= 4096; ++b) {
    const int32_t s = graph_block_stride(b);
    EXPECT_GE(s, b);
    EXPECT_GE(s, prev);
    buckets += s != prev;
    prev = s;
  }
  EXPECT_EQ(buckets, 2 + 4096 / 64);
}

// The sequence buckets are ascending and end at the largest batch that records.
TEST(RecordedBatchSizes, AscendingUpTo256) {
  const std::vector<int32_t> b = recorded_batch_sizes(1000);
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(b.front(), 1);
  EXPECT_EQ(b.back(), 256);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);
  EXPECT_EQ(recorded_batch_sizes(3), (std::vector<int32_t>{1, 2, 4}));
}

// A CPU backend that says it records: it pads with the pool's last block, runs every step
// eagerly, and keeps each recording key and the block-table stride of each batch it is given.
class Recorder : public ForwardingBackend {
 public:
  Recorder(Backend& inner, int32_t pad_block) : ForwardingBackend(inner), pad_block_(pad_block) {}
  int32_t pad_kv_block(int32_t) const override { return pad_block_; }
  GraphStep graph_begin(uint64_t key) override {
    keys.push_back(key);
    return GraphStep::Eager;
  }
  void set_batch(const Batch& b) override {
    strides.push_back(b.max_blocks);
    ForwardingBackend::set_batch(b);
  }
  std::vector<uint64_t> keys;
  std::vector<int32_t> strides;

 private:
  int32_t pad_block_;
};

// tiny-main on two CPU backends, one behind the Recorder: the same prompt, prefilled in chunks
// (never padded), then a decode step at 10, 300 and 600 tokens of context. Through
// run_forward the decode batch is padded to strides of 16, 32 and 64 blocks (one recording key
// each); its logits equal the unpadded step's on the plain backend bit for bit.
TEST(RunForward, DecodePaddedToTheStrideOfItsContext) {
  const std::string dir = test::model_dir("tiny-main");
  constexpr int32_t kBlocks = 64, kBlockSize = 16;
  auto cpu = make_backend(BackendKind::Cpu), plain_be = make_backend(BackendKind::Cpu);
  Recorder rec(*cpu, kBlocks);  // the pool's last block pads
  const auto model = load_model(dir, rec), plain = load_model(dir, *plain_be);
  const ModelConfig& cfg = model->config();
  const KvCacheSpec spec{.n_layers = cfg.n_layers, .n_blocks = kBlocks + 1, .block_size = kBlockSize,
                         .n_kv_heads = cfg.n_kv_heads, .head_dim = cfg.head_dim, .dtype = DType::F32};
  model->init_kv_cache(rec, spec);
  plain->init_kv_cache(*plain_be, spec);

  std::vector<int32_t> table(kBlocks), ids(601);
  for (int32_t b = 0; b < kBlocks; ++b) table[size_t(b)] = b;
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + 13) % uint64_t(cfg.n_vocab));
  auto batch_of = [&](int32_t start, int32_t n) {
    const int32_t n_blocks = (start + n + kBlockSize - 1) / kBlockSize;
    BatchBuilder bb(kBlockSize, n_blocks);
    bb.add(SeqChunk{.ids = ids.data() + start, .n_ids = n, .start_pos = start, .blocks = table.data(),
                    .n_blocks = n_blocks});
    return bb.take();
  };
  auto plain_step = [&](const Batch& b) {
    const PreparedStep p = plain->prepare(b);
    plain->run();
    return test::to_host_f32(*plain_be, p.logits);
  };

  int32_t pos = 0;
  const int32_t contexts[] = {10, 300, 600}, want_stride[] = {16, 32, 64};
  for (int i = 0; i < 3; ++i) {
    const Batch prefill = batch_of(pos, contexts[i] - pos);
    run_forward(*model, rec, prefill);
    plain_step(prefill);
    pos = contexts[i];
    const size_t n_keys = rec.keys.size();
    const Batch decode = batch_of(pos, 1);
    const std::vector<float> got = test::to_host_f32(rec, run_forward(*model, rec, decode));
    EXPECT_TRUE(test::bitwise_equal(got, plain_step(decode))) << "context " << pos;
    ASSERT_EQ(rec.keys.size(), n_keys + 1) << "context " << pos << ": the decode step did not record";
    EXPECT_EQ(rec.strides.back(), want_stride[i]) << "context " << pos;
    ++pos;
  }
  EXPECT_EQ(rec.keys.size(), 3u);  // the prefill chunks ran eagerly
  EXPECT_NE(rec.keys[0], rec.keys[1]);
  EXPECT_NE(rec.keys[1], rec.keys[2]);
}

}  // namespace
}  // namespace tf
