// gloo_store.cpp: the run's collective store over several nodes (runtime/collective/
// store.hpp): an actor on node0 holds the keys, and every node's collectives reach it
// through remote_store.
#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/session/cluster_protocol.hpp"

namespace troupe {

namespace node_protocol {

namespace {

using store_set_atom = caf::atom_constant<caf::atom("storeset")>;
using store_get_atom = caf::atom_constant<caf::atom("storeget")>;
using store_wait_atom = caf::atom_constant<caf::atom("storewait")>;

struct store_state {
  std::map<std::string, std::vector<char>> values;
  struct waiter {
    std::vector<std::string> keys;
    caf::response_promise promise;
    bool get = false;  // answers with the first key's value
  };
  std::vector<waiter> waiting;
  static const char* name;

  bool has_all(const std::vector<std::string>& keys) const {
    for (const auto& k : keys)
      if (!values.count(k))
        return false;
    return true;
  }
};
const char* store_state::name = "troupe.gloo_store";

using store_actor = caf::stateful_actor<store_state>;

caf::behavior gloo_store_actor(store_actor* self) {
  return {
      [self](store_set_atom, const std::string& key, const store_value& value) {
        auto& s = self->state;
        s.values[key] = value.bytes;
        std::vector<store_state::waiter> still;
        for (auto& w : s.waiting) {
          if (!s.has_all(w.keys))
            still.push_back(std::move(w));
          else if (w.get)
            w.promise.deliver(store_value{s.values.at(w.keys.front())});
          else
            w.promise.deliver(caf::unit);
        }
        s.waiting = std::move(still);
      },
      [self](store_get_atom, const std::string& key) -> caf::result<store_value> {
        auto& s = self->state;
        auto it = s.values.find(key);
        if (it != s.values.end())
          return store_value{it->second};
        s.waiting.push_back({{key}, self->make_response_promise(), true});
        return s.waiting.back().promise;
      },
      [self](store_wait_atom, const store_keys& keys) -> caf::result<void> {
        auto& s = self->state;
        if (s.has_all(keys.keys))
          return caf::unit;
        s.waiting.push_back({keys.keys, self->make_response_promise(), false});
        return s.waiting.back().promise;
      },
  };
}

// A collective store whose keys live in the coordinator's store actor. Each call waits at
// most the lesser of its own timeout and the run's (`timeout`, the nodes' patience).
class remote_store final : public collective_store {
 public:
  remote_store(caf::actor_system& system, caf::actor store, double timeout)
      : system_(system), store_(std::move(store)), timeout_(milliseconds(timeout)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    caf::anon_send(store_, store_set_atom::value, key, store_value{data});
  }
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::vector<char> out;
    caf::scoped_actor self{system_};
    std::string failure;
    self->request(store_, std::min(timeout, timeout_), store_get_atom::value, key)
        .receive([&](store_value& v) { out = std::move(v.bytes); },
                 [&](caf::error& e) { failure = system_.render(e); });
    fail_if(failure, "get '" + key + "'");
    return out;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    caf::scoped_actor self{system_};
    std::string failure;
    self->request(store_, std::min(timeout, timeout_), store_wait_atom::value, store_keys{keys})
        .receive([] {}, [&](caf::error& e) { failure = system_.render(e); });
    fail_if(failure, "wait for " + std::to_string(keys.size()) + " key(s)");
  }

 private:
  static void fail_if(const std::string& failure, const std::string& what) {
    if (!failure.empty())
      throw std::runtime_error("the store on the coordinator did not answer " + what + ": " +
                               failure);
  }

  caf::actor_system& system_;
  caf::actor store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

caf::actor spawn_gloo_store(caf::actor_system& system) { return system.spawn(gloo_store_actor); }

}  // namespace node_protocol

std::shared_ptr<collective_store> cluster_store(caf::actor_system& system, caf::actor store,
                                                double timeout) {
  return std::make_shared<node_protocol::remote_store>(system, std::move(store), timeout);
}

}  // namespace troupe
