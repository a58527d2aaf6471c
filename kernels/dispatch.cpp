// dispatch.cpp: the (op, device type) -> function table behind kernels.hpp.
#include "troupe/kernel.hpp"

#include <map>
#include <mutex>
#include <typeindex>
#include <utility>

namespace troupe::kernels {

namespace {

struct entry {
  erased_function fn;
  std::type_index signature;
};

struct table {
  std::mutex mutex;
  std::map<std::pair<std::string, device_type>, entry> entries;
};

// A function-local static, so registrations from static initialisers in any
// translation unit (or plugin) find the table constructed.
table& the_table() {
  static table instance;
  return instance;
}

}  // namespace

void register_kernel(const char* op, device_type type, erased_function fn,
                     const std::type_info& signature) {
  auto& t = the_table();
  std::lock_guard<std::mutex> guard{t.mutex};
  auto [it, inserted] =
      t.entries.emplace(std::make_pair(std::string{op}, type), entry{fn, signature});
  if (!inserted)
    throw std::logic_error(kernel_registered_twice(op, type));
}

erased_function find_kernel(const char* op, device_type type,
                            const std::type_info& signature) {
  auto& t = the_table();
  std::lock_guard<std::mutex> guard{t.mutex};
  auto it = t.entries.find(std::make_pair(std::string{op}, type));
  if (it == t.entries.end()) {
    std::string have;
    for (const auto& [key, value] : t.entries) {
      if (key.first != op)
        continue;
      if (!have.empty())
        have += ", ";
      have += to_string(key.second);
    }
    throw missing_kernel(std::string{"no kernel '"} + op + "' for device type '" +
                         to_string(type) + "'; it exists for: " +
                         (have.empty() ? std::string{"no device type"} : have));
  }
  if (it->second.signature != std::type_index{signature})
    throw std::logic_error(std::string{"kernel '"} + op +
                           "' was registered with a different signature");
  return it->second.fn;
}

bool has_kernel(const char* op, device_type type) {
  auto& t = the_table();
  std::lock_guard<std::mutex> guard{t.mutex};
  return t.entries.count(std::make_pair(std::string{op}, type)) > 0;
}

}  // namespace troupe::kernels

namespace troupe::detail {

namespace {

struct error_list {
  std::mutex mutex;
  std::vector<std::string> errors;
};

error_list& registration_errors() {
  static error_list list;
  return list;
}

}  // namespace

void record_registration_error(const std::string& message) {
  auto& list = registration_errors();
  std::lock_guard<std::mutex> guard{list.mutex};
  list.errors.push_back(message);
}

std::vector<std::string> take_registration_errors() {
  auto& list = registration_errors();
  std::lock_guard<std::mutex> guard{list.mutex};
  auto out = std::move(list.errors);
  list.errors.clear();
  return out;
}

}  // namespace troupe::detail
