// CommThread: one thread that runs communication jobs in submission order.
// BaguaModule submits one job per bucket; keeping them on one thread keeps
// every rank's collectives in the same order while backward goes on. A
// module that never submits (a world of one with nothing to do) never
// starts it.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace bagua::module {

class CommThread {
 public:
  CommThread() = default;  // the thread starts with the first job
  ~CommThread();  // finishes the queued jobs (none after a failed one), then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  void submit(std::function<void()> job);
  // Blocks until every submitted job has run; rethrows the first exception
  // a job threw since the last wait_all(). The jobs queued behind a failed
  // one are dropped, not run: the step has failed, and their collectives
  // would only wait, each up to the group's timeout, on peers that are
  // gone or failing too (a lost node's survivors then leave at once, not
  // a timeout per bucket later). Jobs submitted after wait_all() run.
  void wait_all();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> jobs_;
  bool running_job_ = false;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace bagua::module
