// plugin_test.cpp: load_plugin with the test plugins CMake builds (tests/plugins/): what a
// good plugin adds, the finite-difference check of its layer, and each way loading fails.
#include "runtime/plugin/plugin.hpp"

#include <dlfcn.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <type_traits>

#include "actors/base/actor_kinds.hpp"
#include "troupe/kernel.hpp"

#include "runtime/graph/actor_signature.hpp"
#include "runtime/model/layer.hpp"
#include "runtime/model/layer_check.hpp"
#include "tests/plugins/test_plugins.hpp"
#include "tests/text_checks.hpp"

using namespace troupe;

namespace {

using test_plugins::layer_of_type;

/// The message of the user_error load_plugin(path) throws ("" when it does not throw).
std::string load_error(const std::string& path) {
  try {
    load_plugin(path);
  } catch (const user_error& e) {
    CHECK(e.exit_code() == exit_code::bad_input);  // bad input, like a bad config
    return e.what();
  }
  FAIL("load_plugin('" << path << "') did not throw");
  return {};
}

using troupe::test::contains;

/// True if the library at `path` is mapped in this process now.
bool is_mapped(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle == nullptr)
    return false;
  dlclose(handle);  // drops the reference RTLD_NOLOAD took
  return true;
}

}  // namespace

TEST_CASE("a plugin adds its layer and its actor kind with the wires that kind takes") {
  test_plugins::load();
  CHECK(has_layer("test_scale"));
  const auto* signature = find_actor_signature("test_grad_scaler");
  REQUIRE(signature != nullptr);
  CHECK_FALSE(signature->built_in);
  CHECK(signature->accepts == std::vector<std::string>{"grads"});
  CHECK(signature->emits == std::vector<std::string>{"grads"});
  auto loaded = loaded_plugins();
  CHECK(std::any_of(loaded.begin(), loaded.end(),
                    [](const auto& p) { return p.first == "troupe_test_plugin"; }));
}

TEST_CASE("loading the same plugin twice is a no-op") {
  test_plugins::load();
  auto before = loaded_plugins().size();
  CHECK_NOTHROW(load_plugin(test_plugins::good()));
  CHECK(loaded_plugins().size() == before);
}

TEST_CASE("the built-in actor kinds have the signatures topology.hpp describes") {
  auto check = [](const std::string& kind, std::vector<std::string> accepts,
                  std::vector<std::string> emits) {
    const auto* s = find_actor_signature(kind);
    REQUIRE(s != nullptr);
    CHECK(s->built_in);
    CHECK(s->accepts == accepts);
    CHECK(s->emits == emits);
  };
  check("data_loader", {}, {"activations", "labels"});
  check("layer", {"activations", "params"}, {"activations", "grads"});
  check("loss", {"activations", "labels"}, {});
  check("averager", {"grads", "ring"}, {"grads", "ring"});
  check("optimizer", {"grads"}, {"params"});
  CHECK_THROWS_WITH_AS(register_actor_signature("layer", {}, {}),
                       doctest::Contains("'layer' has its wires declared twice"), std::logic_error);
  CHECK_THROWS_WITH_AS(register_actor_signature("test_never", {"gradients"}, {}),
                       doctest::Contains("names wire kind 'gradients', which does not exist"),
                       std::logic_error);
}

TEST_CASE("a plugin layer passes the gradient check and a variant with a wrong dx fails it") {
  test_plugins::load();
  gradient_check_options options;
  auto good = check_layer_gradients(layer_of_type("test_scale"), options);
  INFO(good.summary);
  CHECK(good.passed);
  auto broken = check_layer_gradients(layer_of_type("test_wrong_gradient"), options);
  CHECK_FALSE(broken.passed);
  REQUIRE_FALSE(broken.failures.empty());
  CHECK(contains(broken.failures.front(), "dx["));
}

TEST_CASE("load_plugin says which way a plugin fails to load") {
  SUBCASE("a file that does not exist") {
    CHECK(load_error("no/such/plugin.so") == "plugin 'no/such/plugin.so' does not exist");
  }
  SUBCASE("a path of ten megabytes is quoted short") {
    auto message = load_error(std::string(10'000'000, 'x') + ".so");
    CHECK(message.size() < 400);
    CHECK(contains(message, "(10000003 bytes) does not exist"));
  }
  SUBCASE("a shared library that is not a troupe plugin registers nothing and is closed") {
    auto message = load_error(test_plugins::not_a_plugin());
    CHECK(contains(message, "is not a troupe plugin"));
    CHECK(contains(message, "add TROUPE_PLUGIN(\"name\")"));
    CHECK(contains(message, "the public header troupe/plugin.hpp"));
    // Its registration lines registered at once inside dlopen (no TROUPE_PLUGIN): the
    // failed load took each of them back before it closed the library.
    CHECK_FALSE(has_layer("test_unmarked_layer"));
    CHECK_FALSE(kernels::has_kernel("test_unmarked.op", device_type::cpu));
    CHECK_FALSE(has_actor_kind("test_unmarked_kind"));
    CHECK(find_actor_signature("test_unmarked_kind") == nullptr);
    CHECK(kernels::take_registration_errors().empty());  // none blamed on troupe
  }
  SUBCASE("a plugin whose registration throws keeps none of what it registered") {
    auto message = load_error(test_plugins::throwing_registration());
    CHECK(contains(message, "(troupe_test_throwing_registration) failed while registering "
                            "layer type 'test_throwing_registration'"));
    CHECK(contains(message, "this registration fails on purpose"));
    CHECK(contains(message, "nothing it registers was kept"));
    CHECK_FALSE(has_layer("test_registered_before_the_throw"));  // committed, then taken back
    CHECK_FALSE(has_layer("test_throwing_registration"));
    CHECK_FALSE(is_mapped(test_plugins::throwing_registration()));
  }
  SUBCASE("a plugin built against another ABI version registers nothing and is unloaded") {
    auto message = load_error(test_plugins::abi_mismatch());
    CHECK(contains(message, "was built against troupe ABI version " +
                                std::to_string(TROUPE_ABI_VERSION + 1) +
                                ", but this troupe has ABI version " +
                                std::to_string(TROUPE_ABI_VERSION)));
    CHECK(contains(message, "rebuild it"));
    // Its static initialisers ran inside dlopen, yet none of its names reached troupe.
    CHECK_FALSE(has_layer("test_abi_mismatch_layer"));
    CHECK_FALSE(kernels::has_kernel("test_abi_mismatch.op", device_type::cpu));
    CHECK_FALSE(has_actor_kind("test_abi_mismatch_kind"));
    CHECK(find_actor_signature("test_abi_mismatch_kind") == nullptr);
    CHECK_FALSE(is_mapped(test_plugins::abi_mismatch()));
  }
  SUBCASE("a plugin that registers a name troupe has") {
    auto message = load_error(test_plugins::clashing());
    CHECK(contains(message, "(troupe_test_clashing_plugin) registers names that exist"));
    CHECK(contains(message, "layer type 'linear' is registered twice"));
    // All or nothing: its names that clash with nothing are not registered either.
    CHECK_FALSE(has_layer("test_clash_innocent"));
    CHECK_FALSE(kernels::has_kernel("test_clash.op", device_type::cpu));
    CHECK_FALSE(has_actor_kind("test_clash_kind"));
    CHECK(find_actor_signature("test_clash_kind") == nullptr);
    // The built-in layer is still the one configs get.
    CHECK(create_layer([] {
            auto c = layer_of_type("linear");
            c.settings["out"] = setting_value{std::int64_t{2}, c.where};
            return c;
          }())
              ->parameters({3})
              .size() == 2);
  }
  SUBCASE("a plugin that failed fails again, with the same message") {
    // Its library may stay mapped (dlclose need not unmap it), so its registration lines
    // would not run again: a second try must not pass silently.
    auto first = load_error(test_plugins::clashing());
    CHECK(load_error(test_plugins::clashing()) == first);
  }
}

TEST_CASE("an unknown layer type lists the registered ones, the plugin's too, with the nearest") {
  test_plugins::load();
  try {
    create_layer(layer_of_type("test_scal"));
    FAIL("an unknown layer type was accepted");
  } catch (const config_error& e) {
    std::string message = e.what();
    INFO(message);
    CHECK(contains(message, "unknown layer type 'test_scal'; did you mean 'test_scale'?"));
    for (const char* name : {"linear", "relu", "test_scale", "test_throwing_backward"})
      CHECK(contains(message, name));
  }
}

// Layers write their output's values; they cannot put another tensor in its place (the
// runtime once had to check for that after every forward).
static_assert(!std::is_assignable<const tensor&, tensor>::value,
              "layer::forward's output must not be re-assignable");
static_assert(std::is_same<decltype(std::declval<const tensor&>().f32()), float*>::value,
              "layer::forward writes its output through f32()");

TEST_CASE("a plugin's registration lines reach troupe only through the loader") {
  test_plugins::load();
  // In libtroupe and in this program the lines register at once (no TROUPE_PLUGIN here).
  CHECK_FALSE(detail::registering_in_plugin());
  CHECK(has_layer("linear"));
  // The good plugin's were deferred, then committed by load_plugin.
  CHECK(has_layer("test_scale"));
  CHECK(has_actor_kind("test_grad_scaler"));
}
