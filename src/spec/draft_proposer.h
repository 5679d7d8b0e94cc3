// Draft-model proposals: a small model with the target's vocabulary (models/tiny-draft for
// models/tiny-main) guesses k tokens by decoding them one after another.
//
// The draft runs on a backend of the target's kind but its own instance, so that it owns its
// KV pool (a backend holds one); its block tables come from a KvManager of its own, the same
// code the target's scheduler uses, with prefix caching. Per sequence it keeps
//   n_valid  positions whose K/V hold the sequence's verified tokens (the KvManager's
//            n_computed: only those are ever hashed), and
//   written  the proposals whose K/V it wrote after them in the last step.
// propose(): the proposals that verification kept are now tokens of the sequence, so the
// leading entries of `written` equal to them extend n_valid (their K/V are right); the rest
// of the table is truncated (blocks released) and regrown for this step. Then one forward
// runs every sequence's uncomputed tokens (new sequences: the prompt, in chunks of at most
// max_batch_tokens; others: one or two tokens) with logits at the last, giving proposal 1;
// forwards 2..k are decode steps of one token per sequence still proposing.
// Each proposal is the argmax (greedy sequences) or a draw from q, the draft's distribution
// after the sequence's own penalty, temperature and truncation.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include "backend/backend.h"
#include "kv/kv_manager.h"
#include "model/arch/model.h"
#include "spec/proposer.h"

namespace tf {

struct DraftParams {
  std::string model_dir;
  std::string backend = "cpu";       // the target's backend kind
  BackendOptions backend_options;    // the target's switches
  int32_t n_blocks = 0;              // the draft's KV pool
  int32_t block_size = 16;
  DType kv_dtype = DType::F32;
  int32_t max_batch_tokens = 512;    // tokens per draft forward
  bool enable_prefix_caching = true;
  int64_t n_vocab = 0;               // the target's: the draft must have the same
  // One forward of the draft model over a batch, returning its logits (the engine passes
  // run_forward, which records decode steps as CUDA Graphs where the backend records); when
  // empty, prepare() then run(), eagerly.
  std::function<TensorView(Model&, Backend&, const Batch&)> forward;
};

class DraftProposer final : public Proposer {
 public:
  // Loads the draft model; throws tf::Error naming the folder when it cannot serve as a
  // draft (vocabulary size differs from n_vocab).
  explicit DraftProposer(const DraftParams& p);
  ~DraftProposer() override;
  std::string name() const override { return "draft"; }
  void propose(std::span<const ProposeRequest> reqs, std::vector<Proposal>& out) override;
  void release(int64_t seq) override;
  double measure_step_seconds(int32_t batch) override;
  int32_t backlog(int64_t seq, const std::vector<int32_t>& tokens) const override;
  // One eager forward of each row count 1..max_batch_tokens (the most a catch-up forward
  // takes), largest first (the scratch is sized once), with logits for min(rows, max_seqs)
  // sequences: every row count a catch-up forward's matmuls see, and every logits row count
  // up to max_seqs. Untimed; the pool's blocks are returned.
  int32_t warm_catch_up(int32_t max_seqs) override;
  int64_t n_cold_catch_ups() const override { return n_cold_; }
  std::string check_invariants() const override;
  int32_t kv_blocks_used() const override { return kv_->pool().n_blocks_used(); }

  const KvManager& kv() const { return *kv_; }

 private:
  struct SeqState {
    int32_t n_valid = 0;
    std::vector<int32_t> written;  // proposals written at positions n_valid, n_valid + 1, ...
  };
  // One sequence proposing in this call.
  struct Work {
    size_t req = 0;         // index into reqs / out
    int32_t from = 0;       // next position to run in the catch-up forward
    int32_t len = 0;        // tokens of the sequence
    int32_t k = 0;          // proposals wanted
    std::vector<int32_t> history;  // tokens + proposals so far, for the penalties
  };
  // Brings n_valid up to date and sizes the table for k proposals; false when blocks are short.
  bool prepare(const ProposeRequest& r, Work& w);
  void catch_up(std::span<const ProposeRequest> reqs, std::vector<Work>& work, std::vector<Proposal>& out);
  void decode(std::span<const ProposeRequest> reqs, std::vector<Work>& work, std::vector<Proposal>& out);
  // The draft's logits over `batch` (params_.forward, or eagerly).
  TensorView run_forward(const Batch& batch);
  // Runs `batch` and appends one proposal per logits row to the sequences in `rows`.
  void forward_and_draw(const Batch& batch, std::span<const ProposeRequest> reqs, std::vector<Work*>& rows,
                        std::vector<Proposal>& out);

  DraftParams params_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvManager> kv_;
  std::unordered_map<int64_t, SeqState> seqs_;
  TensorView ids_dev_;                // greedy ids of a forward, where the logits live
  int32_t warm_rows_ = 0, warm_seqs_ = 0;  // catch-up shapes warmed: rows and logits rows up to these
  int64_t n_cold_ = 0;                     // catch-up forwards past them
  std::vector<float> logits_host_;
};

}  // namespace tf
