// device_name.cpp: parse_device_name(), the one reader of "[nodeK/]cpu:N" / "cuda:N".
#include "runtime/core/device_name.hpp"

#include "runtime/base/limits.hpp"

namespace troupe {

// Note [device index range]
// N is an index into devices of one type. A CPU device is one stream thread bound to core
// N mod (the process's allowed cores) (Note [CPU streams] in stream_worker.cpp), and a CUDA device
// is a GPU of this machine, so no run has a use for thousands of them. 1023 leaves room for
// the largest machines while keeping N far from int overflow: before this parser,
// "cpu:1234567" passed the config loader (nine digits allowed) but not device_id::parse
// (six), and an explicit config ended in an internal error instead of a config error.
namespace {

// A decimal index without sign or leading zeros, at most `largest`; -1 when it is not one.
int read_index(std::string_view number, int largest) {
  if (number.empty() || number.find_first_not_of("0123456789") != std::string_view::npos)
    return -1;
  if (number.size() > 1 && number[0] == '0')
    return -2;
  // The largest indices have 4 digits: a longer number is out of range (and would overflow).
  if (number.size() > 4)
    return largest + 1;
  int index = 0;
  for (char digit : number)
    index = index * 10 + (digit - '0');
  return index;
}

}  // namespace

device_name parse_device_name(std::string_view text) {
  device_name out;
  auto fail = [&](std::string what) {
    out.error = "expected a device like 'cpu:0', 'cuda:0' or 'node1/cpu:0'" + what + ", found " +
                quote_user_text(text);
    return out;
  };
  auto name = text;
  if (auto slash = text.find('/'); slash != std::string_view::npos) {
    auto node = text.substr(0, slash);
    if (node.substr(0, 4) != "node")
      return fail(" (a node is written 'nodeK/', K its rank)");
    int k = read_index(node.substr(4), max_node_index);
    if (k == -1)
      return fail(" (a node is written 'nodeK/', K its rank)");
    if (k == -2)
      return fail(" (a node rank without leading zeros)");
    if (k > max_node_index)
      return fail(" with a node rank in [0, " + std::to_string(max_node_index) + "]");
    out.id.node = k;
    name = text.substr(slash + 1);
  }
  auto colon = name.find(':');
  if (colon == std::string_view::npos)
    return fail("");
  auto type = name.substr(0, colon);
  if (type == "cpu")
    out.id.type = device_type::cpu;
  else if (type == "cuda")
    out.id.type = device_type::cuda;
  else
    return fail("");
  int index = read_index(name.substr(colon + 1), max_device_index);
  if (index == -1)
    return fail("");
  if (index == -2)
    return fail(" (an index without leading zeros)");
  if (index > max_device_index)
    return fail(" with an index in [0, " + std::to_string(max_device_index) + "]");
  out.id.index = index;
  return out;
}

}  // namespace troupe
