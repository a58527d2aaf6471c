// store.hpp: where the ranks of a run's collectives meet, as c10d's Store is: keys set once
// to bytes, read by any rank, waited for with a timeout. A backend that must find its peers
// (gloo's ranks exchange their addresses) rendezvous through it.
//
// Implementations: in this process's memory (make_in_process_store: a run whose ranks are
// all local), the coordinator's (actors/session/gloo_store.cpp: a run over several nodes,
// its keys in an actor on node0), and a prefix over another (make_prefix_store: the contexts
// of one run, or runs sharing a store, never see each other's keys). gloo reads one through
// an adapter (gloo_allreduce.cpp), so nothing above the collectives names gloo's own store.
//
// Not here: deleting keys, counters (c10d's add), a store of its own over TCP (the nodes of
// a run already reach the coordinator through CAF).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace troupe {

class collective_store {
 public:
  virtual ~collective_store() = default;
  /// Sets `key` to `value` (a key set twice keeps the later value).
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  /// The value of `key`, once set; throws std::runtime_error, naming the key, if it is not
  /// within `timeout`.
  virtual std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  /// Returns once every key of `keys` is set; throws std::runtime_error, naming how many are
  /// missing, if they are not within `timeout`.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
};

/// A store in this process's memory, for a run whose ranks are all local.
std::shared_ptr<collective_store> make_in_process_store();

/// `base` with `prefix` before every key ("troupe.123.0/layer_2/" + "rank_0").
std::shared_ptr<collective_store> make_prefix_store(std::string prefix,
                                                    std::shared_ptr<collective_store> base);

}  // namespace troupe
