// store_test.cpp: the collective store (runtime/collective/store.hpp): keys set by one rank
// are read and waited for by others, a key that never comes is an error at the timeout
// naming it, and a prefix keeps the contexts of a run apart.
#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/collective/store.hpp"

namespace {

using namespace std::chrono_literals;
using troupe::collective_store;

std::vector<char> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

}  // namespace

TEST_CASE("a key set by one thread is read and waited for by another") {
  auto store = troupe::make_in_process_store();
  std::thread setter{[&] {
    std::this_thread::sleep_for(20ms);
    store->set("rank_1", bytes_of("address of 1"));
    store->set("rank_2", bytes_of("address of 2"));
  }};
  CHECK(store->get("rank_1", 10s) == bytes_of("address of 1"));  // waits for it
  store->wait({"rank_1", "rank_2"}, 10s);
  setter.join();
  store->set("rank_1", bytes_of("later"));  // set twice: the later value
  CHECK(store->get("rank_1", 0ms) == bytes_of("later"));
}

TEST_CASE("a key that never comes is an error at the timeout that names it") {
  auto store = troupe::make_in_process_store();
  store->set("here", bytes_of("x"));
  const auto started = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(store->get("never", 50ms), doctest::Contains("'never'"),
                       std::runtime_error);
  CHECK(std::chrono::steady_clock::now() - started >= 50ms);
  CHECK_THROWS_WITH_AS(store->wait({"here", "never", "nor this"}, 10ms),
                       doctest::Contains("2 of 3 key(s)"), std::runtime_error);
}

TEST_CASE("a prefix store keeps its keys apart from the same keys under another prefix") {
  auto base = troupe::make_in_process_store();
  auto layer_2 = troupe::make_prefix_store("run/layer_2/", base);
  auto layer_21 = troupe::make_prefix_store("run/layer_21/", base);
  layer_2->set("1", bytes_of("two"));
  layer_21->set("1", bytes_of("twenty-one"));
  CHECK(layer_2->get("1", 1s) == bytes_of("two"));
  CHECK(layer_21->get("1", 1s) == bytes_of("twenty-one"));
  CHECK(base->get("run/layer_2/1", 1s) == bytes_of("two"));
  layer_2->wait({"1"}, 1s);
  CHECK_THROWS_AS(layer_2->wait({"1", "2"}, 10ms), std::runtime_error);
}
