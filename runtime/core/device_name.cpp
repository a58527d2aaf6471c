// device_name.cpp: parse_device_name(), the one reader of "cpu:N" / "cuda:N".
#include "runtime/core/device_name.hpp"

namespace troupe {

// Note [device index range]
// N is an index into devices of one type. A CPU device is one stream thread bound to core
// N mod (the process's allowed cores) (Note [CPU streams] in device.cpp), and a CUDA device
// is a GPU of this machine, so no run has a use for thousands of them. 1023 leaves room for
// the largest machines while keeping N far from int overflow: before this parser,
// "cpu:1234567" passed the config loader (nine digits allowed) but not device_id::parse
// (six), and an explicit config ended in an internal error instead of a config error.
device_name parse_device_name(std::string_view text) {
  device_name out;
  auto fail = [&](std::string what) {
    out.error =
        "expected a device like 'cpu:0' or 'cuda:0'" + what + ", found '" + std::string(text) + "'";
    return out;
  };
  auto colon = text.find(':');
  if (colon == std::string_view::npos)
    return fail("");
  auto type = text.substr(0, colon);
  auto number = text.substr(colon + 1);
  if (type == "cpu")
    out.id.type = device_type::cpu;
  else if (type == "cuda")
    out.id.type = device_type::cuda;
  else
    return fail("");
  if (number.empty() || number.find_first_not_of("0123456789") != std::string_view::npos)
    return fail("");
  if (number.size() > 1 && number[0] == '0')
    return fail(" (an index without leading zeros)");
  // max_device_index has 4 digits: a longer number is out of range (and would overflow).
  int index = max_device_index + 1;
  if (number.size() <= 4) {
    index = 0;
    for (char digit : number)
      index = index * 10 + (digit - '0');
  }
  if (index > max_device_index)
    return fail(" with an index in [0, " + std::to_string(max_device_index) + "]");
  out.id.index = index;
  return out;
}

}  // namespace troupe
