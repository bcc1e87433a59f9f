#include "lattice/core/deadline.h"

#include <gtest/gtest.h>

namespace lattice {
namespace {

using std::chrono::milliseconds;

TEST(UnseenStop, OnlyAnOverrunPastAQuarterOfTheTimeoutAndAtLeast250msIsForgiven) {
  // The coordinator: checks every 50 ms, a 700 ms failure timeout (threshold 250 ms).
  EXPECT_EQ(unseen_stop(milliseconds(50), milliseconds(50), milliseconds(700)), Clock::duration::zero());
  EXPECT_EQ(unseen_stop(milliseconds(290), milliseconds(50), milliseconds(700)), Clock::duration::zero());
  EXPECT_EQ(unseen_stop(milliseconds(2050), milliseconds(50), milliseconds(700)), milliseconds(2000));
  // A 2 s peer timeout: the threshold is its quarter, 500 ms.
  EXPECT_EQ(unseen_stop(milliseconds(520), milliseconds(25), milliseconds(2000)), Clock::duration::zero());
  EXPECT_EQ(unseen_stop(milliseconds(4025), milliseconds(25), milliseconds(2000)), milliseconds(4000));
  // A short test timeout (100 ms) still needs a 250 ms overrun: a loaded host's 30-60 ms gaps
  // between 20 ms ticks are never forgiven, so detection keeps its pace.
  EXPECT_EQ(unseen_stop(milliseconds(80), milliseconds(20), milliseconds(100)), Clock::duration::zero());
  EXPECT_EQ(unseen_stop(milliseconds(1020), milliseconds(20), milliseconds(100)), milliseconds(1000));
  // A check that came early (or a clock read out of order) forgives nothing.
  EXPECT_EQ(unseen_stop(milliseconds(-5), milliseconds(20), milliseconds(100)), Clock::duration::zero());
}

}  // namespace
}  // namespace lattice
