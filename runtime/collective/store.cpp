// store.cpp: the in-process and prefix stores (store.hpp).
#include "runtime/collective/store.hpp"

#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>

#include "troupe/check.hpp"

namespace troupe {

namespace {

class in_process_store final : public collective_store {
 public:
  void set(const std::string& key, const std::vector<char>& value) override {
    {
      std::lock_guard<std::mutex> guard{mutex_};
      values_[key] = value;
    }
    changed_.notify_all();
  }

  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock{mutex_};
    if (!changed_.wait_for(lock, timeout, [&] { return values_.count(key) != 0; }))
      throw std::runtime_error("the store has no key '" + key + "' after " +
                               std::to_string(timeout.count()) + " ms");
    return values_.at(key);
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock{mutex_};
    auto missing = [&] {
      std::size_t count = 0;
      for (const auto& key : keys)
        count += values_.count(key) == 0 ? 1 : 0;
      return count;
    };
    if (!changed_.wait_for(lock, timeout, [&] { return missing() == 0; }))
      throw std::runtime_error("the store lacks " + std::to_string(missing()) + " of " +
                               std::to_string(keys.size()) + " key(s) after " +
                               std::to_string(timeout.count()) + " ms");
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> values_;  // guarded by mutex_
};

class prefix_store final : public collective_store {
 public:
  prefix_store(std::string prefix, std::shared_ptr<collective_store> base)
      : prefix_(std::move(prefix)), base_(std::move(base)) {
    TROUPE_CHECK(base_ != nullptr, "a prefix store '" << prefix_ << "' over no store");
  }

  void set(const std::string& key, const std::vector<char>& value) override {
    base_->set(prefix_ + key, value);
  }
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return base_->get(prefix_ + key, timeout);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> prefixed;
    prefixed.reserve(keys.size());
    for (const auto& key : keys)
      prefixed.push_back(prefix_ + key);
    base_->wait(prefixed, timeout);
  }

 private:
  std::string prefix_;
  std::shared_ptr<collective_store> base_;
};

}  // namespace

std::shared_ptr<collective_store> make_in_process_store() {
  return std::make_shared<in_process_store>();
}

std::shared_ptr<collective_store> make_prefix_store(std::string prefix,
                                                    std::shared_ptr<collective_store> base) {
  return std::make_shared<prefix_store>(std::move(prefix), std::move(base));
}

}  // namespace troupe
