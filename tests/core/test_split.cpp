// core/split.h: comma-separated flag lists and whole integers.
#include <gtest/gtest.h>

#include "core/error.h"
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

TEST(ParseInt, TheWholeStringInRangeOrNothing) {
  EXPECT_EQ(parse_int("42"), 42);
  EXPECT_EQ(parse_int("-7"), -7);
  EXPECT_EQ(parse_int("2147483647", 0, INT32_MAX), INT32_MAX);
  for (const char* bad : {"", "4x", "+4", " 4", "4 ", "1.5", "0x10", "99999999999999999999"})
    EXPECT_EQ(parse_int(bad), std::nullopt) << bad;
  EXPECT_EQ(parse_int("2147483648", 0, INT32_MAX), std::nullopt);
  EXPECT_EQ(parse_int("-1", 0), std::nullopt);
}

using I = std::vector<int64_t>;

TEST(ParseIntList, IntegersInOrder) {
  EXPECT_EQ(parse_int_list("1,2,4", "--batch", 1), (I{1, 2, 4}));
  EXPECT_EQ(parse_int_list("0,,256,", "--splits", 0), (I{0, 256}));
  EXPECT_EQ(parse_int_list("-3", "--x", -5), I{-3});
  EXPECT_EQ(parse_int_list("2147483647", "--batch", 1, INT32_MAX), I{INT32_MAX});
}

// The message names the flag and the item at fault.
void expect_error(std::string_view s, int64_t min, int64_t max, const std::string& message) {
  try {
    parse_int_list(s, "--batch", min, max);
    ADD_FAILURE() << "'" << s << "' was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.what(), message) << s;
  }
}

TEST(ParseIntList, RejectsWhatIsNotAnIntegerInRange) {
  const int64_t big = INT64_MAX;
  expect_error("4x", 1, big, "--batch: '4x' is not an integer >= 1");
  expect_error("1,x2", 1, big, "--batch: 'x2' is not an integer >= 1");
  expect_error("+4", 1, big, "--batch: '+4' is not an integer >= 1");
  expect_error(" 4", 1, big, "--batch: ' 4' is not an integer >= 1");
  expect_error("1.5", 1, big, "--batch: '1.5' is not an integer >= 1");
  expect_error("0", 1, big, "--batch: '0' is not an integer >= 1");
  expect_error("99999999999999999999", 1, big, "--batch: '99999999999999999999' is not an integer >= 1");
  expect_error("2147483648", 1, INT32_MAX, "--batch: '2147483648' is not an integer from 1 to 2147483647");
  expect_error("", 1, big, "--batch: expected a comma-separated list of integers, got ''");
  expect_error(",", 1, big, "--batch: expected a comma-separated list of integers, got ','");
}

}  // namespace
}  // namespace tf
