// The module's communication thread: jobs in order, and a failed job ends
// the step at once (the buckets queued behind it are not run).
#include "module/comm_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

using bagua::module::CommThread;

TEST(CommThread, RunsJobsInSubmissionOrder) {
  CommThread comm;
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) comm.submit([&order, i] { order.push_back(i); });
  comm.wait_all();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

// Bucket 0's collective fails (a peer is gone); buckets 1 and 2, queued
// behind it, would each wait on peers that are gone too. They are dropped:
// wait_all() reports the failure without running them.
TEST(CommThread, JobsQueuedBehindAFailedOneAreDroppedNotRun) {
  CommThread comm;
  std::atomic<bool> release{false};
  std::atomic<int> ran_after{0};
  comm.submit([&] {
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    throw std::runtime_error("peer gone");
  });
  comm.submit([&] { ++ran_after; });
  comm.submit([&] { ++ran_after; });
  release = true;
  EXPECT_THROW(
      {
        try {
          comm.wait_all();
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "peer gone");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_EQ(ran_after.load(), 0) << "the jobs behind the failed one ran";
  // The failure reported, the thread takes jobs again.
  comm.submit([&] { ++ran_after; });
  comm.wait_all();
  EXPECT_EQ(ran_after.load(), 1);
}

}  // namespace
