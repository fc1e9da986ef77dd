// The worker's side of data.cache: the training set read through the Redis
// dataset cache (bagua/cache.h). Only data.train is cached: it is read every
// epoch; data.eval is read once per evaluation and stays uncached.
#pragma once

#include <bagua/cache.h>
#include <bagua/data.h>
#include <bagua/recipe.h>

#include <memory>
#include <string>

namespace bagua::train {

// The loader options for `spec` in this worker: the hosts of
// data.cache.hosts (all of them with cluster_mode, else the one at this
// node's index, GROUP_RANK, modulo their number), or, when hosts is null,
// the server the launcher started (BAGUA_REDIS_HOSTS); the password from
// BAGUA_REDIS_PASSWORD. Throws a user Error when hosts is null and no
// launcher started a server (a torchrun or Slurm worker).
CacheOptions cache_options_for(const CacheSpec& spec);

// What identifies a data source's contents for the cache: each of its
// files' path, size and CRC-32 (read once per worker start). Cached
// samples are tagged with it, so an edited file never meets the entries of
// its earlier version, even on servers that outlive runs (data.cache.hosts).
std::string source_identity(const DataSource& source);

// `train` wrapped in a CachedDataset when recipe.data.cache is set, else
// `train` itself.
std::shared_ptr<Dataset> cache_training_set(const Recipe& recipe, std::shared_ptr<Dataset> train);

}  // namespace bagua::train
