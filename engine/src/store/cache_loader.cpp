// CacheLoader: a write-buffered, fault-tolerant front of RedisStore.
#include <bagua/cache.h>

#include "store/redis_store.h"
#include "store/value_frame.h"

#include <algorithm>
#include <iostream>

namespace bagua {
namespace {

// `text` as a Redis glob that matches it literally.
std::string glob_literal(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace

CacheLoader::CacheLoader(CacheOptions options) : options_(std::move(options)) {
  if (options_.hosts.empty()) throw InvalidArgument("CacheLoader: no Redis hosts given");
  if (options_.writer_buffer_size < 1)
    throw InvalidArgument("CacheLoader: writer_buffer_size must be at least 1, not " +
                          std::to_string(options_.writer_buffer_size));
  if (!options_.warn) {
    options_.warn = [](const std::string& message) { std::cerr << "bagua: warning: " << message << std::endl; };
  }
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    store_ = std::make_unique<store::RedisStore>(options_.hosts, options_.password, options_.timeout);
  } catch (const store::StoreError& e) {
    store_failed(e.what());
  }
}

CacheLoader::~CacheLoader() {
  try {
    flush();
  } catch (...) {
    // A destructor reports nothing more than flush() already warned.
  }
}

void CacheLoader::warn_once(const std::string& kind, const std::string& message) {
  std::lock_guard<std::mutex> lock(warn_mutex_);
  if (std::find(warned_.begin(), warned_.end(), kind) != warned_.end()) return;
  warned_.push_back(kind);
  options_.warn(message);
}

void CacheLoader::store_failed(const std::string& what) {
  store_.reset();
  queued_.clear();
  queued_index_.clear();
  failed_ = true;
  failed_at_ = std::chrono::steady_clock::now();
  const auto retry_s = std::chrono::duration_cast<std::chrono::seconds>(options_.retry_after).count();
  warn_once("store", "dataset cache '" + options_.dataset_name + "' unavailable (" + what +
                         "); samples are decoded from the source (results are the same), and the cache is "
                         "retried every " + std::to_string(retry_s) + " s");
}

store::RedisStore* CacheLoader::usable_store() {
  if (store_) return store_.get();
  if (!failed_ || std::chrono::steady_clock::now() - failed_at_ < options_.retry_after) return nullptr;
  try {
    store_ = std::make_unique<store::RedisStore>(options_.hosts, options_.password, options_.timeout);
    failed_ = false;
  } catch (const store::StoreError&) {
    failed_at_ = std::chrono::steady_clock::now();  // silent: warned at the first failure
  }
  return store_.get();
}

bool CacheLoader::available() {
  std::lock_guard<std::mutex> lock(mutex_);
  return usable_store() != nullptr;
}

std::vector<std::optional<std::string>> CacheLoader::lookup(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::optional<std::string>> values(keys.size());
  std::vector<std::string> remote_keys;
  std::vector<size_t> remote_positions;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string key = full_key(keys[i]);
    if (auto queued = queued_index_.find(key); queued != queued_index_.end()) {
      values[i] = store::unframe_value(queued_[queued->second].second);
    } else {
      remote_keys.push_back(std::move(key));
      remote_positions.push_back(i);
    }
  }
  store::RedisStore* store = remote_keys.empty() ? nullptr : usable_store();
  if (store == nullptr) return values;
  std::vector<std::optional<std::string>> framed;
  try {
    framed = store->get_many(remote_keys);
  } catch (const store::StoreError& e) {
    store_failed(e.what());
    return values;
  }
  for (size_t j = 0; j < framed.size(); ++j) {
    if (!framed[j]) continue;
    values[remote_positions[j]] = store::unframe_value(*framed[j]);
    if (!values[remote_positions[j]]) {
      warn_once("corrupt", "dataset cache '" + options_.dataset_name + "': the entry " + remote_keys[j] +
                               " is corrupt (length or CRC-32 does not match); decoding it from the source "
                               "(further corrupt entries are handled the same way, silently)");
    }
  }
  return values;
}

void CacheLoader::put(const std::string& key, std::string value) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed_ && !store_) return;  // the store is down: nothing to write to
  std::string full = full_key(key);
  std::string framed = store::frame_value(value);
  if (auto queued = queued_index_.find(full); queued != queued_index_.end()) {
    queued_[queued->second].second = std::move(framed);
  } else {
    queued_index_.emplace(full, queued_.size());
    queued_.emplace_back(std::move(full), std::move(framed));
  }
  if (static_cast<int64_t>(queued_.size()) >= options_.writer_buffer_size) flush_locked();
}

void CacheLoader::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  flush_locked();
}

void CacheLoader::flush_locked() {
  if (queued_.empty()) return;
  store::RedisStore* store = usable_store();
  if (store != nullptr) {
    try {
      store->set_many(queued_);
    } catch (const store::StoreError& e) {
      store_failed(e.what());
    }
  }
  queued_.clear();
  queued_index_.clear();
}

std::string CacheLoader::get(const std::string& key, const LoadFn& load_fn) {
  return get_many({key}, load_fn).front();
}

std::vector<std::string> CacheLoader::get_many(const std::vector<std::string>& keys, const LoadFn& load_fn) {
  std::vector<std::optional<std::string>> found = lookup(keys);
  std::vector<std::string> values(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (found[i]) {
      values[i] = std::move(*found[i]);
    } else {
      values[i] = load_fn(keys[i]);
      put(keys[i], values[i]);
    }
  }
  return values;
}

int64_t CacheLoader::num_keys() {
  std::lock_guard<std::mutex> lock(mutex_);
  store::RedisStore* store = usable_store();
  if (store == nullptr) return -1;
  try {
    return store->num_keys();
  } catch (const store::StoreError& e) {
    store_failed(e.what());
    return -1;
  }
}

void CacheLoader::cleanup() {
  std::lock_guard<std::mutex> lock(mutex_);
  queued_.clear();
  queued_index_.clear();
  store::RedisStore* store = usable_store();
  if (store == nullptr) return;
  try {
    store->remove_matching(glob_literal(options_.dataset_name) + "_*");
  } catch (const store::StoreError& e) {
    store_failed(e.what());
  }
}

std::string CacheLoader::describe() const {
  const auto& first = options_.hosts.front();
  std::string text = "redis " + first.host + ":" + std::to_string(first.port);
  if (options_.hosts.size() > 1) text += " (+" + std::to_string(options_.hosts.size() - 1) + " more)";
  return text + " as '" + options_.dataset_name + "'";
}

}  // namespace bagua
