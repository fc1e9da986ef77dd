// One connection to one Redis server (hiredis): connect with a timeout,
// AUTH, PING; then commands sent as argument vectors (binary-safe), either
// one at a time or pipelined (append several, then read their replies).
// Every failure (connect, timeout, closed connection, an error reply)
// throws StoreError naming host:port; after one, the connection is not
// used again.
#pragma once

#include <bagua/errors.h>
#include <bagua/recipe_spec.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

struct redisContext;
struct redisReply;

namespace bagua::store {

class StoreError : public Error {
 public:
  explicit StoreError(const std::string& message) : Error(message, false) {}
};

struct ReplyDeleter {
  void operator()(redisReply* reply) const;
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

class RedisConnection {
 public:
  // Connects, sends AUTH `password` when not empty, and PING. `timeout`
  // bounds the connect and each later command.
  RedisConnection(const CacheHost& host, const std::string& password, std::chrono::milliseconds timeout);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // One command, its reply (never an error reply: that throws).
  Reply command(const std::vector<std::string>& argv);
  // Pipelining: queue a command; read_reply() returns the replies in order.
  void append(const std::vector<std::string>& argv);
  Reply read_reply();

  // "host:port".
  const std::string& endpoint() const { return endpoint_; }

 private:
  [[noreturn]] void fail(const std::string& what);
  redisContext* context_ = nullptr;
  std::string endpoint_;
};

}  // namespace bagua::store
