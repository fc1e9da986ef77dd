#include "module/comm_thread.h"

namespace bagua::module {

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CommThread::submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) return;  // the step failed: wait_all() reports it (see there)
    jobs_.push_back(std::move(job));
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });  // on the first job
  }
  wake_.notify_one();
}

void CommThread::wait_all() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return jobs_.empty() && !running_job_; });
  if (error_) {
    auto error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

void CommThread::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    running_job_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    running_job_ = false;
    if (error && !error_) error_ = error;
    if (error_) jobs_.clear();  // see wait_all()
    if (jobs_.empty()) idle_.notify_all();
  }
}

}  // namespace bagua::module
