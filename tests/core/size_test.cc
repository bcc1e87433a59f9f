#include "lattice/core/size.h"

#include <gtest/gtest.h>

namespace lattice {
namespace {

TEST(ParseSize, AcceptedSpellings) {
  struct Case {
    const char* text;
    uint64_t bytes;
  };
  const Case cases[] = {
      {"0", 0},           {"8", 8},           {"8B", 8},          {"8b", 8},
      {"4K", 4096},       {"4k", 4096},       {"4KB", 4096},      {"4kB", 4096},
      {"4KiB", 4096},     {"4M", 4u << 20},   {"4m", 4u << 20},   {"4MB", 4u << 20},
      {"4MiB", 4u << 20}, {"1G", 1u << 30},   {"1g", 1u << 30},   {"1GB", 1u << 30},
      {"1GiB", 1u << 30}, {"1.5K", 1536},     {"1.5M", 3u << 19}, {"0.5G", 1u << 29},
      {"2.0", 2},         {"1.25K", 1280},    {"007", 7},         {"1024G", uint64_t{1} << 40},
  };
  for (const auto& c : cases) {
    auto r = parse_size(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().to_string();
    EXPECT_EQ(*r, c.bytes) << c.text;
  }
}

TEST(ParseSize, RefusedSpellingsSayWhy) {
  const char* bad[] = {"",    "K",   "-1",    "+1",  " 8",  "8 ",  "8Q",   "8KK", "1.5",
                       "0.1K", "1.",  ".5K",   "1e3", "4Mb", "4T",   "1,5K", "0x10", "1025G",
                       "99999999999999999999", "1.0000000001K"};
  for (const char* text : bad) {
    auto r = parse_size(text);
    ASSERT_FALSE(r.ok()) << "'" << text << "' was accepted as " << *r;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << text;
    EXPECT_FALSE(r.status().message().empty()) << text;
  }
}

TEST(ParseSize, LimitIsInclusiveAndNamed) {
  EXPECT_EQ(*parse_size("1G", uint64_t{1} << 30), uint64_t{1} << 30);
  auto r = parse_size("1025M", uint64_t{1} << 30);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("1G"), std::string::npos) << r.status().message();
}

TEST(FormatSize, RoundTripsThroughTheParser) {
  for (uint64_t b : {uint64_t{0}, uint64_t{1}, uint64_t{1000}, uint64_t{1536}, uint64_t{4096}, uint64_t{3} << 20,
                     uint64_t{1} << 30, (uint64_t{1} << 30) + 1}) {
    auto back = parse_size(format_size(b));
    ASSERT_TRUE(back.ok()) << format_size(b);
    EXPECT_EQ(*back, b);
  }
  EXPECT_EQ(format_size(4u << 20), "4M");
  EXPECT_EQ(format_size(1536), "1536");
}

}  // namespace
}  // namespace lattice
