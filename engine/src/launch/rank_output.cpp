#include "launch/rank_output.h"

#include <cerrno>
#include <cstring>
#include <poll.h>
#include <unistd.h>

namespace bagua::launch {

bool write_fully(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {  // someone made our stdout non-blocking
        pollfd writable{fd, POLLOUT, 0};
        ::poll(&writable, 1, -1);
        continue;
      }
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void RankOutput::feed(Stream stream, const char* data, size_t size) {
  std::string& pending = pending_[static_cast<int>(stream)];
  const char* end = data + size;
  while (data < end) {
    const char* newline = static_cast<const char*>(std::memchr(data, '\n', end - data));
    const char* stop = newline ? newline : end;
    // Never let one unterminated line grow without bound.
    size_t room = kMaxLine - pending.size();
    if (static_cast<size_t>(stop - data) > room) {
      pending.append(data, room);
      data += room;
      emit(stream, pending);
      pending.clear();
      continue;
    }
    pending.append(data, stop);
    if (!newline) break;
    emit(stream, pending);
    pending.clear();
    data = newline + 1;
  }
}

void RankOutput::finish(Stream stream) {
  std::string& pending = pending_[static_cast<int>(stream)];
  if (!pending.empty()) emit(stream, pending);
  pending.clear();
}

void RankOutput::emit(Stream stream, const std::string& line) {
  int terminal = stream == Stream::kStdout ? sinks_.stdout_fd : sinks_.stderr_fd;
  if (terminal >= 0) {
    std::string text = sinks_.prefix + line + "\n";
    write_fully(terminal, text.data(), text.size());
  }
  if (sinks_.log.valid()) {
    std::string text = line + "\n";
    write_fully(sinks_.log.get(), text.data(), text.size());
  }
  if (sinks_.tail_lines > 0) {
    tail_.push_back(line);
    while (tail_.size() > sinks_.tail_lines) tail_.pop_front();
  }
}

}  // namespace bagua::launch
