#include "train/dataset_cache.h"

#include <bagua/errors.h>
#include <bagua/redis_server.h>

#include "train/crc32.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

namespace bagua::train {
namespace {

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// "HOST:PORT" (the launcher's BAGUA_REDIS_HOSTS).
CacheHost parse_host(const std::string& text) {
  const auto colon = text.rfind(':');
  CacheHost host;
  if (colon != std::string::npos && colon > 0) {
    host.host = text.substr(0, colon);
    host.port = std::atoi(text.c_str() + colon + 1);
  }
  if (host.port < 1 || host.port > 65535)
    throw ConfigError(std::string(kRedisHostsEnv) + " is '" + text + "', not HOST:PORT");
  return host;
}

}  // namespace

CacheOptions cache_options_for(const CacheSpec& spec) {
  CacheOptions options;
  options.dataset_name = spec.dataset_name;
  options.writer_buffer_size = spec.writer_buffer_size;
  options.password = env_or_empty(kRedisPasswordEnv);
  if (spec.hosts.empty()) {
    const std::string spawned = env_or_empty(kRedisHostsEnv);
    if (spawned.empty())
      throw Error("data.cache.hosts is null, which asks bagua run's launcher to start a redis-server per node, "
                  "but this worker was not started by bagua run's launcher (torchrun, Slurm, ...): list running "
                  "servers in data.cache.hosts",
                  true);
    options.hosts = {parse_host(spawned)};
  } else if (spec.cluster_mode) {
    options.hosts = spec.hosts;
  } else {
    const int node = std::atoi(env_or_empty("GROUP_RANK").c_str());
    options.hosts = {spec.hosts[static_cast<size_t>(node) % spec.hosts.size()]};
  }
  return options;
}

std::string source_identity(const DataSource& source) {
  std::string id;
  for (const std::string* path : {&source.images, &source.labels, &source.path}) {
    if (path->empty()) continue;
    id += *path + " ";
    std::ifstream in(*path, std::ios::binary);
    if (!in) {
      id += "unreadable\n";  // the data set's own load says why
      continue;
    }
    std::vector<char> buffer(1 << 20);
    uint64_t bytes = 0;
    uint32_t crc = crc32_initial();
    while (in) {
      in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      const auto n = static_cast<size_t>(in.gcount());
      crc = crc32_update(crc, buffer.data(), n);
      bytes += n;
    }
    char text[64];
    std::snprintf(text, sizeof(text), "%llu bytes, crc32 %08x\n", static_cast<unsigned long long>(bytes), crc);
    id += text;
  }
  return id;
}

std::shared_ptr<Dataset> cache_training_set(const Recipe& recipe, std::shared_ptr<Dataset> train) {
  if (!recipe.data.cache) return train;
  const DataSource& source = recipe.data.train;
  CachedDatasetOptions options;
  options.pad_value = source.pad_value;
  options.source_identity = source_identity(source);
  return std::make_shared<CachedDataset>(std::move(train), cache_options_for(*recipe.data.cache), options);
}

}  // namespace bagua::train
