// Prompt lookup: the longest suffix (max_n down to min_n) that occurred earlier, its most
// recent occurrence, and the tokens after it; copies that run into the end continue with
// their own proposals.
#include <gtest/gtest.h>

#include "core/error.h"
#include "spec/ngram_proposer.h"

namespace tf {
namespace {

std::vector<int32_t> lookup(const std::vector<int32_t>& t, int32_t k, NgramParams p = {}) {
  return ngram_lookup(t, p, k);
}

TEST(NgramLookup, ProposesWhatFollowedTheLongestEarlierSuffix) {
  // "... 7 8 9 | 1 2 ... 8 9": the 2-gram (8 9) occurred once, followed by 1 2 3.
  const std::vector<int32_t> t = {5, 7, 8, 9, 1, 2, 3, 4, 6, 8, 9};
  EXPECT_EQ(lookup(t, 3), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(lookup(t, 1), (std::vector<int32_t>{1}));
  // The 3-gram (7 8 9) wins over a more recent (8 9) when both exist.
  const std::vector<int32_t> u = {7, 8, 9, 1, 8, 9, 2, 0, 7, 8, 9};
  EXPECT_EQ(lookup(u, 2), (std::vector<int32_t>{1, 8}));
  EXPECT_EQ(lookup(u, 2, {.min_n = 1, .max_n = 2}), (std::vector<int32_t>{2, 0})) << "most recent 2-gram";
}

TEST(NgramLookup, MostRecentOccurrenceAndShorterSuffixes) {
  const std::vector<int32_t> t = {3, 1, 3, 2, 4, 3};  // 1-gram (3) occurs at 0 and 2: 2 follows the later
  EXPECT_EQ(lookup(t, 2), (std::vector<int32_t>{2, 4}));
  EXPECT_TRUE(lookup({1, 2, 3, 4}, 3).empty()) << "no earlier occurrence";
  EXPECT_TRUE(lookup({1, 2, 3, 4, 4}, 3, {.min_n = 2, .max_n = 3}).empty()) << "only a 1-gram matches";
  EXPECT_TRUE(lookup({7}, 3).empty());
  EXPECT_TRUE(lookup({1, 1}, 0).empty()) << "k = 0";
}

TEST(NgramLookup, ARepeatingSpanKeepsRepeating) {
  // Period 3 (a b c a b c a b): the copy of "c a b" runs past the end and continues itself.
  const std::vector<int32_t> t = {10, 11, 12, 10, 11, 12, 10, 11};
  EXPECT_EQ(lookup(t, 7), (std::vector<int32_t>{12, 10, 11, 12, 10, 11, 12}));
  const std::vector<int32_t> same = {4, 4, 4};
  EXPECT_EQ(lookup(same, 4), (std::vector<int32_t>{4, 4, 4, 4}));
}

TEST(NgramProposer, ProposesPerRequestAndValidatesItsParameters) {
  NgramProposer p({.min_n = 1, .max_n = 2});
  const std::vector<int32_t> a = {1, 2, 3, 1, 2}, b = {9, 8};
  const SamplingParams sp;
  const std::vector<ProposeRequest> reqs = {{.seq = 0, .tokens = &a, .k = 2, .sampling = &sp},
                                            {.seq = 1, .tokens = &b, .k = 4, .sampling = &sp}};
  std::vector<Proposal> out;
  p.propose(reqs, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].tokens, (std::vector<int32_t>{3, 1}));
  EXPECT_TRUE(out[0].q.empty()) << "point masses";
  EXPECT_TRUE(out[1].tokens.empty());
  EXPECT_THROW(NgramProposer(NgramParams{.min_n = 0, .max_n = 2}), Error);
  EXPECT_THROW(NgramProposer(NgramParams{.min_n = 3, .max_n = 2}), Error);
}

}  // namespace
}  // namespace tf
