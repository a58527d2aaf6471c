// dispatch.cpp: the (op, device type) -> function table behind kernels.hpp.
#include "troupe/kernel.hpp"

#include <dlfcn.h>

#include <map>
#include <mutex>
#include <typeindex>
#include <utility>

#include "kernels/registration_journal.hpp"
#include "troupe/check.hpp"

namespace troupe::detail {

namespace {

// The calling thread's open journal, or null (Note [undoing a failed load]).
thread_local registration_journal* open_journal = nullptr;

}  // namespace

}  // namespace troupe::detail

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

// Note [CUDA kernels loaded on demand]
// The CUDA kernels live in a library of their own, libtroupe_cuda.so.N beside
// libtroupe.so.N, loaded the first time anyone looks up, checks or registers a CUDA kernel;
// its static registrations then fill this table. Linked into libtroupe, cuBLAS and cuBLASLt
// (about 700 MB) were mapped into every process that loaded it, GPU or not: 0.3-0.5 s at
// each start on our VMs, a third of ctest's time (one process per test) and of every short
// troupe command. Loading never happens twice; a library that does not load (no CUDA
// runtime on the machine) leaves the table without CUDA kernels, and a lookup says why.
std::once_flag cuda_loaded;
// True on the loading thread while the library registers itself (from inside dlopen,
// inside call_once): those registrations must not wait for the load they are part of.
// Any other thread waits in call_once until the load is done.
thread_local bool cuda_loading = false;
std::string cuda_load_error;

void load_cuda_kernels() {
#ifdef TROUPE_CUDA_LIBRARY
  if (cuda_loading)
    return;  // the library's own registrations, from inside dlopen
  std::call_once(cuda_loaded, [] {
    std::string path = TROUPE_CUDA_LIBRARY;
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&load_cuda_kernels), &self) != 0 &&
        self.dli_fname != nullptr) {
      const std::string here = self.dli_fname;
      const auto slash = here.rfind('/');
      if (slash != std::string::npos)
        path = here.substr(0, slash + 1) + TROUPE_CUDA_LIBRARY;
    }
    cuda_loading = true;
    // troupe's own library: what it registers stays, whoever's load asked for it.
    auto* journal = std::exchange(detail::open_journal, nullptr);
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    detail::open_journal = journal;
    cuda_loading = false;
    if (handle == nullptr) {
      const char* why = dlerror();
      cuda_load_error = "the CUDA kernels (" + path + ") did not load: " +
                        (why != nullptr ? why : "no reason given") +
                        "; build them with cmake --build build --target troupe_cuda "
                        "(scripts/build.sh builds everything)";
    }
  });
#endif
}

}  // namespace

void register_kernel(const char* op, device_type type, erased_function fn,
                     const std::type_info& signature) {
  if (type == device_type::cuda)
    load_cuda_kernels();  // first troupe's, so that a clash is found here
  auto& t = the_table();
  std::lock_guard<std::mutex> guard{t.mutex};
  auto [it, inserted] =
      t.entries.emplace(std::make_pair(std::string{op}, type), entry{fn, signature});
  if (!inserted)
    throw std::logic_error(kernel_registered_twice(op, type));
  detail::record_undo([key = it->first] {
    auto& t = the_table();
    std::lock_guard<std::mutex> guard{t.mutex};
    t.entries.erase(key);
  });
}

erased_function find_kernel(const char* op, device_type type,
                            const std::type_info& signature) {
  if (type == device_type::cuda)
    load_cuda_kernels();
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
                         (have.empty() ? std::string{"no device type"} : have) +
                         (type == device_type::cuda && !cuda_load_error.empty()
                              ? " (" + cuda_load_error + ")"
                              : std::string{}));
  }
  if (it->second.signature != std::type_index{signature})
    throw std::logic_error(std::string{"kernel '"} + op +
                           "' was registered with a different signature");
  return it->second.fn;
}

erased_function replace_kernel(const char* op, device_type type, erased_function fn,
                               const std::type_info& signature) {
  if (type == device_type::cuda)
    load_cuda_kernels();  // its registrations first, so that they are what is replaced
  auto& t = the_table();
  std::lock_guard<std::mutex> guard{t.mutex};
  const auto key = std::make_pair(std::string{op}, type);
  auto it = t.entries.find(key);
  erased_function previous = it == t.entries.end() ? nullptr : it->second.fn;
  if (fn == nullptr) {
    if (it != t.entries.end())
      t.entries.erase(it);
  } else if (it == t.entries.end()) {
    t.entries.emplace(key, entry{fn, signature});
  } else {
    it->second = entry{fn, signature};
  }
  return previous;
}

std::string load_cuda_library() {
  load_cuda_kernels();
#ifdef TROUPE_CUDA_LIBRARY
  return cuda_load_error;
#else
  return "this troupe was built without CUDA (cmake -DTROUPE_CUDA=ON needs the CUDA toolkit)";
#endif
}

bool has_kernel(const char* op, device_type type) {
  if (type == device_type::cuda)
    load_cuda_kernels();
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

void record_undo(std::function<void()> undo) {
  if (open_journal != nullptr)
    open_journal->undos_.push_back(std::move(undo));
}

registration_journal::registration_journal() {
  TROUPE_CHECK(open_journal == nullptr, "a registration journal is open on this thread already");
  auto& list = registration_errors();
  std::lock_guard<std::mutex> guard{list.mutex};
  errors_before_ = list.errors.size();
  open_journal = this;
}

registration_journal::~registration_journal() {
  open_journal = nullptr;
  if (!kept_)
    undo();
}

void registration_journal::undo() {
  while (!undos_.empty()) {
    auto take_back = std::move(undos_.back());
    undos_.pop_back();
    take_back();
  }
  auto& list = registration_errors();
  std::lock_guard<std::mutex> guard{list.mutex};
  if (list.errors.size() > errors_before_)
    list.errors.resize(errors_before_);
}

}  // namespace troupe::detail
