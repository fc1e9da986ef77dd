#include "comm/work.h"

#include <bagua/errors.h>

#include <iostream>

namespace bagua {

Work::Work() = default;
Work::Work(std::unique_ptr<State> state) : state_(std::move(state)) {}
Work::Work(Work&&) noexcept = default;
Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    try {
      wait();
    } catch (const std::exception& e) {
      std::cerr << "bagua: error in an unwaited collective: " << e.what() << "\n";
    }
    state_ = std::move(other.state_);
  }
  return *this;
}

Work::~Work() {
  try {
    wait();
  } catch (const std::exception& e) {
    std::cerr << "bagua: error in an unwaited collective: " << e.what() << "\n";
  }
}

void Work::wait() {
  if (!state_ || state_->done) return;
  state_->done = true;
  try {
    for (auto& w : state_->works) {
      // (c10d blocks the host until a work completes when wait() is given
      // a timeout, NCCL's included.)
      if (state_->stream_ordered) {
        w->wait();
      } else {
        w->wait(state_->timeout);
      }
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError(state_->what + " failed: " + comm::message_of(e));
  }
  if (state_->finish) state_->finish();
}

bool Work::is_completed() {
  if (!state_ || state_->done) return true;
  for (auto& w : state_->works) {
    if (!w->isCompleted()) return false;
  }
  return true;
}

namespace comm {
Work make_work(std::vector<C10dWorkPtr> works, std::function<void()> finish, std::string what,
               std::chrono::milliseconds timeout, bool stream_ordered) {
  auto state = std::make_unique<Work::State>();
  state->stream_ordered = stream_ordered;
  state->works = std::move(works);
  state->finish = std::move(finish);
  state->what = std::move(what);
  state->timeout = timeout;
  return Work(std::move(state));
}
}  // namespace comm

}  // namespace bagua
