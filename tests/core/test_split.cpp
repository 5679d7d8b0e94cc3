// core/split.h: comma-separated flag lists.
#include <gtest/gtest.h>

#include "core/split.h"

namespace tf {
namespace {

using V = std::vector<std::string>;

TEST(SplitList, ItemsInOrder) {
  EXPECT_EQ(split_list("q8_0,q4_0,w8"), (V{"q8_0", "q4_0", "w8"}));
  EXPECT_EQ(split_list("wanda"), (V{"wanda"}));
}

TEST(SplitList, EmptyItemsLeftOut) {
  EXPECT_EQ(split_list(""), V{});
  EXPECT_EQ(split_list(","), V{});
  EXPECT_EQ(split_list(",a,,b,"), (V{"a", "b"}));
}

TEST(SplitList, NoTrimmingAndOtherSeparators) {
  EXPECT_EQ(split_list(" a, b"), (V{" a", " b"}));
  EXPECT_EQ(split_list("1:2::3", ':'), (V{"1", "2", "3"}));
}

}  // namespace
}  // namespace tf
