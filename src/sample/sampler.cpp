#include "sample/sampler.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <functional>

#include "core/error.h"

namespace tf {

// ---------------------------------------------------------------------------------------------
// Rng

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

// The state is four consecutive SplitMix64 outputs, as the xoshiro authors recommend; it is
// never all zero in practice (SplitMix64 is a bijection of its counter).
Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) s = splitmix64(x);
}

// xoshiro256** 1.0 (Blackman & Vigna).
uint64_t Rng::next_u64() {
  const uint64_t result = std::rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = std::rotl(s_[3], 45);
  return result;
}

// The top 53 bits (the low bits of xoshiro256** are its weakest) times 2^-53: every value is
// a multiple of 2^-53 in [0, 1 - 2^-53].
double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

// ---------------------------------------------------------------------------------------------
// Validation

void validate(const SamplingParams& p) {
  // Written as !(good) so that NaN is rejected too.
  if (!(p.temperature >= 0.0f && std::isfinite(p.temperature)))
    fail("sampling: temperature must be a finite number >= 0 (0 = greedy), got {}", p.temperature);
  if (!(p.top_k >= 0)) fail("sampling: top_k must be >= 0 (0 = off), got {}", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    fail("sampling: top_p must be in (0, 1] (1 = off), got {}", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    fail("sampling: min_p must be in [0, 1] (0 = off), got {}", p.min_p);
  if (!(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty)))
    fail("sampling: repetition_penalty must be a finite number > 0 (1 = off), got {}",
         p.repetition_penalty);
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f))
    fail("sampling: presence_penalty must be in [-2, 2] (0 = off), got {}", p.presence_penalty);
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f))
    fail("sampling: frequency_penalty must be in [-2, 2] (0 = off), got {}", p.frequency_penalty);
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0) fail("sampling: logit_bias token id {} is negative", id);
    if (!(bias >= -100.0f && bias <= 100.0f))
      fail("sampling: logit_bias of token {} must be in [-100, 100], got {}", id, bias);
  }
}

bool uses_history(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

bool adjusts_logits(const SamplingParams& p) { return uses_history(p) || !p.logit_bias.empty(); }

// ---------------------------------------------------------------------------------------------
// Free functions

// Each distinct id is penalised once however often it occurs (HF's gather/scatter does the
// same); a bitmap of n_vocab bits (16 KiB at 128k) finds the distinct ids in O(n_vocab/64 +
// n_history) without sorting the history.
void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> history,
                              float penalty) {
  if (penalty == 1.0f || history.empty()) return;
  const size_t n_vocab = logits.size();
  std::vector<uint64_t> seen((n_vocab + 63) / 64, 0);
  for (int32_t id : history) {
    TF_ASSERT(id >= 0 && static_cast<size_t>(id) < n_vocab, "history id {} outside vocab of {}",
              id, n_vocab);
    uint64_t& word = seen[static_cast<size_t>(id) / 64];
    const uint64_t bit = uint64_t{1} << (static_cast<size_t>(id) % 64);
    if (word & bit) continue;
    word |= bit;
    float& l = logits[static_cast<size_t>(id)];
    l = l > 0.0f ? l / penalty : l * penalty;
  }
}

void adjust_logits(std::span<float> logits, std::span<const int32_t> history, size_t n_prompt,
                   const SamplingParams& p) {
  for (const auto& [id, bias] : p.logit_bias) {
    TF_ASSERT(id >= 0 && static_cast<size_t>(id) < logits.size(), "logit_bias id {} outside vocab of {}", id,
              logits.size());
    logits[static_cast<size_t>(id)] += bias;
  }
  apply_repetition_penalty(logits, history, p.repetition_penalty);
  if ((p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) || history.size() <= n_prompt) return;
  // Sorted, each distinct id is one run whose length is its count.
  std::vector<int32_t> generated(history.begin() + std::ptrdiff_t(n_prompt), history.end());
  std::sort(generated.begin(), generated.end());
  for (size_t i = 0; i < generated.size();) {
    const int32_t id = generated[i];
    TF_ASSERT(id >= 0 && static_cast<size_t>(id) < logits.size(), "history id {} outside vocab of {}", id,
              logits.size());
    size_t j = i + 1;
    while (j < generated.size() && generated[j] == id) ++j;
    float& l = logits[static_cast<size_t>(id)];
    l -= float(j - i) * p.frequency_penalty;
    l -= p.presence_penalty;
    i = j;
  }
}

// Two passes: the maximum, with 16 independent lanes so that the compiler vectorises it (a
// single running max is a dependency chain it may not reorder), then the first id holding it.
// Ties go to the lowest id; a NaN never wins over a number (x > NaN is false); an all-NaN
// row gives 0.
int32_t argmax(std::span<const float> logits) {
  TF_ASSERT(!logits.empty(), "argmax of an empty row");
  const float* x = logits.data();
  const size_t n = logits.size();
  constexpr size_t kLanes = 16;
  float lane_max[kLanes];
  std::fill(lane_max, lane_max + kLanes, -INFINITY);
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lane_max[j] = x[i + j] > lane_max[j] ? x[i + j] : lane_max[j];
  }
  float m = -INFINITY;
  for (size_t j = 0; j < kLanes; ++j) m = lane_max[j] > m ? lane_max[j] : m;
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (i = 0; i < n; ++i) {
    if (x[i] == m) return static_cast<int32_t>(i);
  }
  return 0;
}

double log_softmax_at(std::span<const float> logits, int32_t id) {
  TF_ASSERT(id >= 0 && static_cast<size_t>(id) < logits.size(), "id {} outside vocab of {}", id,
            logits.size());
  const double m = logits[static_cast<size_t>(argmax(logits))];
  TF_ASSERT(std::isfinite(m), "logits have no finite maximum");
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - m);
  return (static_cast<double>(logits[static_cast<size_t>(id)]) - m) - std::log(sum);
}

// ---------------------------------------------------------------------------------------------
// The kept set

namespace {

// exp(z) in float for z <= 0, within 1 ulp (relative error < 8e-8, measured over [-87.3, 0]),
// and 0 below -87.3, where exp leaves the normal floats (such a token weighs < 1e-38 against
// the best token's 1). Cephes' expf: z = n ln2 + r with |r| <= ln2/2, a degree-7 polynomial
// for e^r, and 2^n put together in the exponent bits. It exists because glibc's exp is a call
// the compiler cannot vectorise, and the untruncated distribution over a 128k vocabulary
// needs 128k of them per token. No calls and only selects; n is rounded with the 1.5 * 2^23
// trick, so that baseline SSE2 vectorises it too (needs -fno-trapping-math, see CMakeLists).
inline float exp_weight(float z) {
  const float zc = z < -87.3f ? -87.3f : z;  // NaN passes through and poisons the mass
  const float n = (zc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(z / ln2)
  float r = zc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return z < -87.3f ? 0.0f : p * two_n;
}

// Order of top-k: logit descending, then id ascending, so exactly k survive a tie.
bool better_logit(const SampleCandidate& a, const SampleCandidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

// Order of top-p: probability descending, then id ascending.
bool better_w(const SampleCandidate& a, const SampleCandidate& b) {
  return a.w > b.w || (a.w == b.w && a.id < b.id);
}

// cands <- the k best ids of logits by better_logit, in no particular order; w left unset.
//
// O(n) whatever the order of the row, without sorting it. A threshold t is guessed from a
// strided sample of 4096 logits: the sample entry of rank r stands for rank ~ r n / 4096 of
// the row, and r is chosen to aim at about 2k + 1000 row entries >= t. One pass collects the
// entries >= t; if there are at least k of them, the k-th largest logit is >= t, so the top-k
// are all among them and nth_element on this short list finds them. If the guess was too high
// (a row ordered against the stride), the list is the whole row instead.
void select_top_k(std::span<const float> logits, int32_t k, std::vector<SampleCandidate>& cands) {
  const size_t n_vocab = logits.size();
  const size_t n_keep = static_cast<size_t>(k);
  constexpr size_t kNumSample = 4096;
  cands.clear();
  bool guessed = false;
  if (n_vocab > 2 * kNumSample) {
    const size_t stride = n_vocab / kNumSample;
    std::vector<float> sample(kNumSample);
    for (size_t j = 0; j < kNumSample; ++j) sample[j] = logits[j * stride];
    const size_t rank = std::min(kNumSample - 1, 2 * n_keep * kNumSample / n_vocab + 32);
    std::nth_element(sample.begin(), sample.begin() + static_cast<ptrdiff_t>(rank), sample.end(),
                     std::greater<float>());
    const float t = sample[rank];
    for (size_t i = 0; i < n_vocab; ++i) {
      if (logits[i] >= t) cands.push_back({static_cast<int32_t>(i), logits[i], 0.0f});
    }
    guessed = cands.size() >= n_keep;
  }
  if (!guessed) {
    cands.resize(n_vocab);
    for (size_t i = 0; i < n_vocab; ++i) cands[i] = {static_cast<int32_t>(i), logits[i], 0.0f};
  }
  std::nth_element(cands.begin(), cands.begin() + static_cast<ptrdiff_t>(n_keep), cands.end(),
                   better_logit);
  cands.resize(n_keep);
}

// Keeps the shortest prefix, in better_w order, whose mass reaches target (at least one).
//
// Without a full sort: w is a positive float, so its bit pattern grows with it, and the top
// 12 bits (exponent and 3 mantissa bits) name a bucket of w within a factor 1.125. One pass
// sums the mass per bucket; walking buckets from the top finds the one where the cumulative
// mass reaches target. Every token in a higher bucket is in the prefix, every token in a lower
// one is not, and only the crossing bucket is sorted. O(n) plus the sort of one bucket.
void cut_top_p(std::vector<SampleCandidate>& cands, double target) {
  constexpr size_t kNumBuckets = (0x3f800000u >> 20) + 1;  // w in [0, 1]
  auto bucket = [](float w) { return std::bit_cast<uint32_t>(w) >> 20; };
  std::array<double, kNumBuckets> bucket_mass{};
  for (const SampleCandidate& c : cands) bucket_mass[bucket(c.w)] += c.w;

  double cum = 0.0;  // mass of the buckets above the crossing one
  uint32_t crossing = 0;
  for (uint32_t b = kNumBuckets; b-- > 0;) {
    if (cum + bucket_mass[b] >= target || b == 0) {
      crossing = b;
      break;
    }
    cum += bucket_mass[b];
  }
  // cands: [begin, above_end) higher buckets, [above_end, crossing_end) the crossing bucket,
  // then the lower buckets, which are dropped.
  const auto above_end = std::partition(cands.begin(), cands.end(),
                                        [&](const SampleCandidate& c) { return bucket(c.w) > crossing; });
  const auto crossing_end = std::partition(above_end, cands.end(),
                                           [&](const SampleCandidate& c) { return bucket(c.w) == crossing; });
  std::sort(above_end, crossing_end, better_w);
  auto end = above_end;
  while (end != crossing_end && (end == cands.begin() || cum < target)) cum += (end++)->w;
  cands.erase(end, cands.end());
}

// The untruncated case keeps every id; its draw skips whole blocks by their mass.
constexpr size_t kBlock = 1024;

// scratch.w[i] <- w of every id; returns the mass. Block by block, so that the sum reads
// what was just written from L1; the sum runs in 8 lanes (vectorised; the order of additions
// differs from a plain loop only in the last bits).
double weigh_all(std::span<const float> logits, float max_logit, float temperature,
                 SamplerScratch& scratch) {
  const size_t n = logits.size();
  const size_t n_blocks = (n + kBlock - 1) / kBlock;
  scratch.w.resize(n);
  scratch.block_mass.resize(n_blocks);
  const float* __restrict x = logits.data();
  float* __restrict w = scratch.w.data();
  double mass = 0.0;
  for (size_t b = 0; b < n_blocks; ++b) {
    const size_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
    for (size_t i = lo; i < hi; ++i) w[i] = exp_weight((x[i] - max_logit) / temperature);
    double lane[8] = {};
    size_t i = lo;
    for (; i + 8 <= hi; i += 8) {
      for (size_t j = 0; j < 8; ++j) lane[j] += w[i + j];
    }
    double s = 0.0;
    for (double l : lane) s += l;
    for (; i < hi; ++i) s += w[i];
    scratch.block_mass[b] = s;
    mass += s;
  }
  return mass;
}

// What build_kept_set made: every id (scratch.w) or the candidates (scratch.candidates).
struct KeptSet {
  bool all_ids;
  double mass;  // sum of the kept w
};

// Builds the set `sample` draws from.
//
// Definition (HF order, renormalising after each step): p = softmax(logits / T); top-k keeps
// the k best by (logit desc, id asc); top-p keeps the shortest prefix of what is left, sorted
// by (p desc, id asc), whose renormalised mass reaches top_p; min-p keeps p >= min_p * p_max.
//
// How it is computed: with w = exp((logit - max) / T), renormalising never changes a ratio,
// so top-p compares cumulative w with top_p * M (M: the mass of the top-k set) and min-p
// compares w with min_p (the best token has w == 1 and survives every step). Min-p keeps a
// prefix of the order top-p cuts, so the two commute and their intersection is the shorter
// prefix. Before top-p we also drop every w < (1 - top_p) M / n (n: size of the
// top-k set), which cannot be in the top-p prefix: if its last token x had a smaller w, the
// tokens after it would weigh at most n w_x and M < top_p M + n w_x. So one O(n) filter by
// max(min_p, that bound) leaves few candidates for top-p.
KeptSet build_kept_set(std::span<const float> logits, const SamplingParams& p,
                       SamplerScratch& scratch) {
  const size_t n_vocab = logits.size();
  TF_ASSERT(n_vocab > 0, "sampling from an empty row");
  const float max_logit = logits[static_cast<size_t>(argmax(logits))];
  TF_ASSERT(std::isfinite(max_logit), "logits have no finite maximum");
  const bool top_k_on = p.top_k > 0 && static_cast<size_t>(p.top_k) < n_vocab;
  const bool top_p_on = p.top_p < 1.0f;
  std::vector<SampleCandidate>& cands = scratch.candidates;

  // Phase 1: top-k and weights. M = mass of the top-k set (of every id without top-k).
  double mass_top_k = 0.0;
  size_t n_top_k = n_vocab;
  if (top_k_on) {
    select_top_k(logits, p.top_k, cands);
    for (SampleCandidate& c : cands) {
      c.w = exp_weight((c.logit - max_logit) / p.temperature);
      mass_top_k += c.w;
    }
    n_top_k = cands.size();
  } else {
    mass_top_k = weigh_all(logits, max_logit, p.temperature, scratch);
  }
  TF_ASSERT(std::isfinite(mass_top_k), "NaN or infinite logits");

  // Phase 2: one filter for min-p (exact: w and min_p are floats) and the top-p bound (loose:
  // halved, against rounding).
  const double top_p_floor =
      top_p_on ? 0.5 * (1.0 - static_cast<double>(p.top_p)) * mass_top_k / static_cast<double>(n_top_k)
               : 0.0;
  const float floor = std::max(p.min_p, static_cast<float>(top_p_floor));
  if (!top_k_on && floor == 0.0f) return {.all_ids = true, .mass = mass_top_k};
  if (top_k_on) {
    std::erase_if(cands, [&](const SampleCandidate& c) { return c.w < floor; });
  } else {
    cands.clear();
    for (size_t i = 0; i < n_vocab; ++i) {
      if (scratch.w[i] >= floor) cands.push_back({static_cast<int32_t>(i), logits[i], scratch.w[i]});
    }
  }

  // Phase 3: top-p.
  if (top_p_on) cut_top_p(cands, static_cast<double>(p.top_p) * mass_top_k);

  // The draw walks ids in increasing order (as draw_all does), so that the token a uniform
  // picks depends on the distribution only, not on how the kept set was found. The kept set is
  // small whenever something truncates, so the sort is cheap.
  std::sort(cands.begin(), cands.end(),
            [](const SampleCandidate& a, const SampleCandidate& b) { return a.id < b.id; });
  double mass = 0.0;
  for (const SampleCandidate& c : cands) mass += c.w;
  TF_ASSERT(mass >= 1.0, "kept set lost the most likely token (mass {})", mass);
  return {.all_ids = false, .mass = mass};
}

// Inverse CDF over the candidates (in id order). The running sum ends at exactly
// `mass` (same additions in the same order), so only u * mass rounding up to mass falls
// through, to the last candidate that has weight.
int32_t draw_candidates(const std::vector<SampleCandidate>& kept, double mass, double u) {
  const double target = u * mass;
  double acc = 0.0;
  for (const SampleCandidate& c : kept) {
    acc += c.w;
    if (target < acc) return c.id;
  }
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
    if (it->w > 0.0f) return it->id;
  }
  TF_ASSERT(false, "empty kept set");
  return -1;
}

// Inverse CDF over every id in order: whole blocks by their mass, then ids within the block.
// So the token is the smallest id whose cumulative probability exceeds u. A block's
// mass was summed in another order than this walk, so the walk can fall off the end of the
// right block by a rounding error (~1e-16 of the mass); it then takes the block's last token
// that has weight.
int32_t draw_all(const SamplerScratch& scratch, double mass, double u) {
  const double target = u * mass;
  const size_t n = scratch.w.size();
  const size_t n_blocks = scratch.block_mass.size();
  double acc = 0.0;
  size_t b = 0;
  while (b + 1 < n_blocks && !(target < acc + scratch.block_mass[b])) acc += scratch.block_mass[b++];
  const size_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
  for (size_t i = lo; i < hi; ++i) {
    acc += scratch.w[i];
    if (target < acc) return static_cast<int32_t>(i);
  }
  for (size_t i = hi; i-- > lo;) {
    if (scratch.w[i] > 0.0f) return static_cast<int32_t>(i);
  }
  TF_ASSERT(false, "block without weight");
  return -1;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Sampler

Sampler::Sampler(const SamplingParams& params, size_t n_prompt)
    : params_(params), n_prompt_(n_prompt), rng_(params.seed) {
  validate(params_);
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> history) {
  adjust_logits(logits, history, n_prompt_, params_);
  if (params_.greedy()) return argmax(logits);
  const KeptSet kept = build_kept_set(logits, params_, scratch_);
  const double u = rng_.uniform();
  return kept.all_ids ? draw_all(scratch_, kept.mass, u)
                      : draw_candidates(scratch_.candidates, kept.mass, u);
}

std::vector<float> Sampler::distribution(std::span<const float> logits,
                                         std::span<const int32_t> history) const {
  std::vector<float> penalised(logits.begin(), logits.end());
  adjust_logits(penalised, history, n_prompt_, params_);
  std::vector<float> probs(logits.size(), 0.0f);
  if (params_.greedy()) {
    probs[static_cast<size_t>(argmax(penalised))] = 1.0f;
    return probs;
  }
  SamplerScratch scratch;
  const KeptSet kept = build_kept_set(penalised, params_, scratch);
  if (kept.all_ids) {
    for (size_t i = 0; i < probs.size(); ++i) probs[i] = static_cast<float>(scratch.w[i] / kept.mass);
  } else {
    for (const SampleCandidate& c : scratch.candidates) {
      probs[static_cast<size_t>(c.id)] = static_cast<float>(c.w / kept.mass);
    }
  }
  return probs;
}

}  // namespace tf
