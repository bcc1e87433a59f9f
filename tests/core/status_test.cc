#include "lattice/core/status.h"

#include <gtest/gtest.h>

#include "lattice/core/deadline.h"
#include "lattice/core/random.h"

namespace lattice {
namespace {

Result<int> half(int x) {
  if (x % 2) return InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Result<int> quarter(int x) {
  LATTICE_ASSIGN_OR_RETURN(int h, half(x));
  LATTICE_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

TEST(Status, OkAndErrors) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = PeerLost("heartbeat silent", 3);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kPeerLost);
  EXPECT_EQ(s.peer(), 3);
  EXPECT_EQ(s.to_string(), "peer-lost (peer 3): heartbeat silent");
  EXPECT_EQ(s.with_context("recv").message(), "recv: heartbeat silent");
}

TEST(Result, PropagatesErrors) {
  EXPECT_EQ(*quarter(8), 2);
  auto r = quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "odd: 3");
  Result<int> bad{Status::Ok()};  // an ok Status is not a value: becomes an internal error
  EXPECT_EQ(bad.status().code(), ErrorCode::kInternal);
}

TEST(Deadline, ExpiresAndClamps) {
  auto d = Deadline::after(std::chrono::milliseconds(20));
  EXPECT_FALSE(d.expired());
  EXPECT_GT(d.remaining_ms_for_poll(), 0);
  EXPECT_TRUE(Deadline::now().expired());
  EXPECT_EQ(Deadline::now().remaining(), Clock::duration::zero());
  EXPECT_EQ(Deadline::never().remaining_ms_for_poll(), -1);
  EXPECT_EQ(d.min(Deadline::never()).when(), d.when());
}

TEST(Random, KeysDiffer) {
  EXPECT_NE(secure_random_u64(), secure_random_u64());
}

}  // namespace
}  // namespace lattice
