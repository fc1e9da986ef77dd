#include "store/redis_connection.h"

#include <hiredis/hiredis.h>

#include <sys/time.h>

namespace bagua::store {
namespace {

timeval to_timeval(std::chrono::milliseconds timeout) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  return tv;
}

struct ArgvView {
  std::vector<const char*> pointers;
  std::vector<size_t> lengths;
  explicit ArgvView(const std::vector<std::string>& argv) {
    for (const auto& a : argv) {
      pointers.push_back(a.data());
      lengths.push_back(a.size());
    }
  }
};

}  // namespace

void ReplyDeleter::operator()(redisReply* reply) const {
  if (reply != nullptr) freeReplyObject(reply);
}

RedisConnection::RedisConnection(const CacheHost& host, const std::string& password,
                                 std::chrono::milliseconds timeout)
    : endpoint_(host.host + ":" + std::to_string(host.port)) {
  context_ = redisConnectWithTimeout(host.host.c_str(), host.port, to_timeval(timeout));
  if (context_ == nullptr) throw StoreError(endpoint_ + ": cannot allocate a Redis connection");
  if (context_->err) fail("cannot connect");
  if (redisSetTimeout(context_, to_timeval(timeout)) != REDIS_OK) fail("cannot set the command timeout");
  if (!password.empty()) command({"AUTH", password});
  Reply pong = command({"PING"});
  if (pong->type != REDIS_REPLY_STATUS || std::string(pong->str, pong->len) != "PONG")
    throw StoreError(endpoint_ + ": PING was not answered with PONG");
}

RedisConnection::~RedisConnection() {
  if (context_ != nullptr) redisFree(context_);
}

void RedisConnection::fail(const std::string& what) {
  std::string reason = context_ != nullptr && context_->err ? context_->errstr : "unknown error";
  throw StoreError(endpoint_ + ": " + what + ": " + reason);
}

Reply RedisConnection::command(const std::vector<std::string>& argv) {
  append(argv);
  return read_reply();
}

void RedisConnection::append(const std::vector<std::string>& argv) {
  ArgvView view(argv);
  if (redisAppendCommandArgv(context_, static_cast<int>(argv.size()), view.pointers.data(), view.lengths.data()) !=
      REDIS_OK)
    fail("cannot send " + argv.front());
}

Reply RedisConnection::read_reply() {
  void* raw = nullptr;
  if (redisGetReply(context_, &raw) != REDIS_OK || raw == nullptr) fail("no reply");
  Reply reply(static_cast<redisReply*>(raw));
  if (reply->type == REDIS_REPLY_ERROR) {
    throw StoreError(endpoint_ + ": " + std::string(reply->str, reply->len));
  }
  return reply;
}

}  // namespace bagua::store
