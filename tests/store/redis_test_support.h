// Helpers for the dataset cache tests: real redis-servers started by the
// test (bagua::RedisServer, on free ports, killed at the end of the test),
// and a counting load function.
#pragma once

#include <bagua/cache.h>
#include <bagua/redis_server.h>

#include "store/redis_connection.h"

#include <hiredis/hiredis.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace bagua::testing {

// A private redis-server with a password, logging to a temp file.
inline std::unique_ptr<RedisServer> start_test_server(int64_t maxmemory = 64 << 20) {
  RedisServerOptions options;
  options.password = random_secret();
  options.maxmemory = maxmemory;
  static int count = 0;
  options.log_path = (std::filesystem::temp_directory_path() /
                      ("bagua-redis-test-" + std::to_string(::getpid()) + "-" + std::to_string(count++) + ".log"))
                         .string();
  return std::make_unique<RedisServer>(options);
}

// Options for a loader over `servers`, collecting its warnings in `warnings`.
inline CacheOptions loader_options(const std::vector<const RedisServer*>& servers, const std::string& name,
                                   std::vector<std::string>* warnings, int64_t writer_buffer_size = 1) {
  CacheOptions options;
  options.dataset_name = name;
  options.writer_buffer_size = writer_buffer_size;
  for (const auto* s : servers) options.hosts.push_back(s->host());
  options.password = servers.front()->password();
  options.timeout = std::chrono::milliseconds(500);
  options.warn = [warnings](const std::string& message) { warnings->push_back(message); };
  return options;
}

// A direct connection, to look at or tamper with what the loader stored.
inline std::unique_ptr<store::RedisConnection> connect_to(const RedisServer& server) {
  return std::make_unique<store::RedisConnection>(server.host(), server.password(), std::chrono::milliseconds(1000));
}

}  // namespace bagua::testing
