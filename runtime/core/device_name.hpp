// device_name.hpp: the one parser of device names ("cpu:N", "cuda:N", "node1/cpu:N") for the
// whole tree.
//
// The config loader, the explicit topology reader and device_id::parse all read device names
// through parse_device_name(), so they agree on what a name is: a known type, a colon, and an
// index N in [0, max_device_index] written without sign or leading zeros (so that one
// device has one spelling and the duplicate checks cannot be fooled by "cpu:01").
//
// It does not decide which devices a run may use (the planner checks that a device is
// listed in [parallel] devices and that this build can run it, runtime/graph/) and it
// throws nothing: a bad name is a value with a message saying what was expected, which
// the caller turns into an error at the position it knows.
#pragma once

#include <string>
#include <string_view>

#include "troupe/device.hpp"

namespace troupe {

/// The largest index N of "cpu:N" / "cuda:N". Note [device index range] in the .cpp.
constexpr int max_device_index = 1023;
/// The largest rank K of "nodeK/": as many processes as a run can start (launch_env).
constexpr int max_node_index = 4095;

/// A parsed device name: `id` when `error` is empty, else `error` says what was expected
/// and what was found ("expected a device like 'cpu:0' or 'cuda:0', found 'gpu0'").
struct device_name {
  device_id id;
  std::string error;

  bool ok() const { return error.empty(); }
};

/// Parses "cpu:N" or "cuda:N" (0 <= N <= max_device_index, no leading zeros), optionally
/// after "nodeK/" (0 <= K <= max_node_index): the device of another process of the run.
device_name parse_device_name(std::string_view text);

}  // namespace troupe
