// launch_env.cpp: reading and checking the launcher variables (launch_env.hpp), and Slurm's
// host list syntax, as far as its first host. Strings in, a checked node_identity out;
// every refusal names the variable, quotes its value and says what was expected.
#include "runtime/net/launch_env.hpp"

#include <algorithm>
#include <cctype>
#include <optional>

#include "runtime/base/limits.hpp"
#include "troupe/error.hpp"

namespace troupe::net {

// Note [which launcher]
// ~~~~~~~~~~~~~~~~~~~~~
// Launchers nest, and the innermost one that started this process is the one whose
// variables describe it; the outer ones' variables are inherited and describe something
// else. So the conventions are read from the inside out:
//
// - troupe's own first: `troupe launch` sets them deliberately, and may itself run under
//   any of the others.
// - torchrun next: the usual multi-node recipe is one torchrun per node under srun or
//   mpirun, where SLURM_PROCID / OMPI_COMM_WORLD_RANK number the torchruns (the nodes) and
//   RANK numbers the workers.
// - Open MPI before Slurm: mpirun inside a Slurm allocation starts its processes through
//   daemons that srun started, one per node, and the processes inherit the daemon's
//   SLURM_PROCID (the node's index, not the process's rank); OMPI_COMM_WORLD_RANK is what
//   mpirun gave this process. (srun starting the processes directly sets no OMPI_ variables
//   before MPI_Init, which troupe never calls, so Slurm's are read there.)
//
// A convention counts as used when its rank or its world size is set, and then both must
// be: a half-set convention is a broken launch script, and guessing the other half would
// start a run that waits forever for processes that never come. Slurm is the exception:
// a batch script has SLURM_NTASKS without SLURM_PROCID (the tasks are the srun steps it
// starts), so only SLURM_PROCID marks a Slurm task. And troupe's own variables count
// whichever is set: no other tool sets TROUPE_COORDINATOR.

namespace {

using getenv_function = std::function<const char*(const char*)>;

std::optional<std::string> lookup(const getenv_function& getenv, const char* name) {
  const char* value = getenv(name);
  if (value == nullptr)
    return std::nullopt;
  return std::string{value};
}

[[noreturn]] void refuse(const std::string& message) {
  throw user_error("launch environment: " + message);
}

std::string quoted(const char* name, const std::string& value) {
  return std::string{name} + "=" + quote_user_text(value);
}

bool all_digits(std::string_view text) {
  if (text.empty())
    return false;
  for (char c : text)
    if (!std::isdigit(static_cast<unsigned char>(c)))
      return false;
  return true;
}

// The whole number in `value` within low .. high; `subject` names it in messages
// ("RANK='x'") and `expected` says what it should be, in words.
int parse_number(const std::string& subject, const std::string& value, long long low,
                 long long high, const std::string& expected) {
  if (value.empty())
    refuse(subject + " is empty: expected " + expected);
  if (value[0] == '-' && all_digits(std::string_view{value}.substr(1)))
    refuse(subject + " is negative: expected " + expected);
  if (!all_digits(value))
    refuse(subject + " is not a whole number: expected " + expected);
  // More than 10 digits (leading zeros aside) is out of range anyway; this keeps stoll safe.
  const auto first_significant = value.find_first_not_of('0');
  const auto significant =
      first_significant == std::string::npos ? 0 : value.size() - first_significant;
  const long long number = significant > 10 ? high + 1 : std::stoll(value);
  if (number < low || number > high)
    refuse(subject + " is out of range: expected " + expected);
  return static_cast<int>(number);
}

int parse_number(const char* name, const std::string& value, long long low, long long high,
                 const std::string& expected) {
  return parse_number(quoted(name, value), value, low, high, expected);
}

int parse_port(const std::string& subject, const std::string& value) {
  return parse_number(subject, value, 1, 65535, "a TCP port from 1 to 65535");
}

void check_host(const char* name, const std::string& value, const std::string& host) {
  if (host.empty())
    refuse(quoted(name, value) + " names no host: expected a host name or an IP address");
  for (char c : host)
    if (std::isspace(static_cast<unsigned char>(c)) || c == '[' || c == ']')
      refuse(quoted(name, value) + " is not a host: expected a host name or an IP address");
}

// TROUPE_COORDINATOR: "host:port", or "[v6 address]:port".
void parse_coordinator(const std::string& value, node_identity& out) {
  const char* name = "TROUPE_COORDINATOR";
  const std::string expected = "expected host:port, e.g. node01:29500 or [fd00::1]:29500";
  std::string host;
  std::string port;
  if (!value.empty() && value[0] == '[') {
    const auto close = value.find(']');
    if (close == std::string::npos || close + 1 >= value.size() || value[close + 1] != ':')
      refuse(quoted(name, value) + " is malformed: " + expected);
    host = value.substr(1, close - 1);
    port = value.substr(close + 2);
  } else {
    const auto colon = value.rfind(':');
    if (colon == std::string::npos)
      refuse(quoted(name, value) + " has no port: " + expected);
    host = value.substr(0, colon);
    port = value.substr(colon + 1);
    if (host.find(':') != std::string::npos)
      refuse(quoted(name, value) + " looks like an IPv6 address without brackets: " + expected);
  }
  check_host(name, value, host);
  out.coordinator_host = host;
  out.coordinator_port = parse_port("the port " + quote_user_text(port) + " of " + quoted(name, value), port);
}

// The variables that hold one launcher's rank, world size and local rank.
struct convention {
  const char* launcher;
  const char* rank;
  const char* world_size;
  const char* local_rank;
};

// Reads the rank, world size and local rank of `names`; false when the convention is not
// in use (Note [which launcher]).
bool read_ranks(const getenv_function& getenv, const convention& names, node_identity& out) {
  const auto rank = lookup(getenv, names.rank);
  const auto world_size = lookup(getenv, names.world_size);
  const bool world_size_marks_use = std::string_view{names.launcher} != "slurm";
  if (!rank && !(world_size && world_size_marks_use))
    return false;
  if (!rank)
    refuse(quoted(names.world_size, *world_size) + " is set but " + names.rank + " is not: a " +
           names.launcher + " launch sets both (is the launch script complete?)");
  if (!world_size)
    refuse(quoted(names.rank, *rank) + " is set but " + names.world_size + " is not: a " +
           names.launcher + " launch sets both (is the launch script complete?)");
  out.launcher = names.launcher;
  out.world_size = parse_number(
      names.world_size, *world_size, 1, max_world_size,
      "the number of processes in the run, from 1 to " + std::to_string(max_world_size));
  const std::string below_world = "from 0 to " + std::to_string(out.world_size - 1) + " (" +
                                  names.world_size + " is " + std::to_string(out.world_size) + ")";
  out.rank = parse_number(names.rank, *rank, 0, max_world_size, "a rank " + below_world);
  if (out.rank >= out.world_size)
    refuse(quoted(names.rank, *rank) + " is not below " + quoted(names.world_size, *world_size) +
           ": expected a rank " + below_world);
  out.local_rank = 0;
  if (const auto local_rank = lookup(getenv, names.local_rank))
    out.local_rank = parse_number(names.local_rank, *local_rank, 0, out.world_size - 1,
                                  "this process's rank on its machine, " + below_world);
  return true;
}

// MASTER_ADDR and MASTER_PORT where set (torchrun's names, which Open MPI and Slurm runs
// use too); what `out` holds (the defaults) otherwise.
void read_master(const getenv_function& getenv, node_identity& out) {
  if (const auto host = lookup(getenv, "MASTER_ADDR")) {
    check_host("MASTER_ADDR", *host, *host);
    out.coordinator_host = *host;
  }
  if (const auto port = lookup(getenv, "MASTER_PORT"))
    out.coordinator_port = parse_port(quoted("MASTER_PORT", *port), *port);
}

[[noreturn]] void refuse_nodelist(std::string_view nodelist, const std::string& what) {
  throw user_error("Slurm node list " + quote_user_text(nodelist) + " is malformed: " + what +
                   "; expected comma-separated hosts with bracketed ranges, e.g. "
                   "node[01-04,07],gpu5");
}

// Whether the decimal `low` is at most `high` (any length, leading zeros allowed).
bool not_above(std::string_view low, std::string_view high) {
  auto strip = [](std::string_view digits) {
    const auto first = digits.find_first_not_of('0');
    return first == std::string_view::npos ? std::string_view{} : digits.substr(first);
  };
  low = strip(low);
  high = strip(high);
  return low.size() != high.size() ? low.size() < high.size() : low <= high;
}

// Checks the range list between a pair of brackets ("01-04,07"), at `where` (1-based) in
// `nodelist`; the first number of it, as written.
std::string_view first_of_ranges(std::string_view nodelist, std::string_view ranges,
                                 std::size_t where) {
  const std::string at = " in the brackets at character " + std::to_string(where);
  if (ranges.empty())
    refuse_nodelist(nodelist, "an empty range list" + at);
  std::string_view first;
  std::size_t start = 0;
  while (start <= ranges.size()) {
    const auto comma = std::min(ranges.find(',', start), ranges.size());
    const auto item = ranges.substr(start, comma - start);
    const auto dash = item.find('-');
    const auto low = item.substr(0, dash);
    const auto high = dash == std::string_view::npos ? low : item.substr(dash + 1);
    if (!all_digits(low) || !all_digits(high))
      refuse_nodelist(nodelist, quote_user_text(item) + at + " is not N or N-M");
    if (!not_above(low, high))
      refuse_nodelist(nodelist, "the range " + quote_user_text(item) + at + " runs backwards");
    if (first.empty())
      first = low;
    start = comma + 1;
  }
  return first;
}

}  // namespace

std::string first_slurm_host(std::string_view nodelist) {
  if (nodelist.empty())
    refuse_nodelist(nodelist, "it is empty");
  std::string first;
  bool in_first_entry = true;
  bool entry_empty = true;
  for (std::size_t i = 0; i <= nodelist.size();) {
    const std::string at = " at character " + std::to_string(i + 1);
    if (i == nodelist.size() || nodelist[i] == ',') {
      if (entry_empty)
        refuse_nodelist(nodelist, "an empty entry" + at);
      in_first_entry = false;
      entry_empty = true;
      ++i;
      continue;
    }
    const char c = nodelist[i];
    if (c == '[') {
      const auto close = nodelist.find(']', i + 1);
      const auto nested = nodelist.find('[', i + 1);
      if (close == std::string_view::npos)
        refuse_nodelist(nodelist, "the '['" + at + " is never closed");
      if (nested < close)
        refuse_nodelist(nodelist, "a '[' inside the brackets opened" + at);
      const auto number = first_of_ranges(nodelist, nodelist.substr(i + 1, close - i - 1), i + 1);
      if (in_first_entry)
        first += number;
      entry_empty = false;
      i = close + 1;
      continue;
    }
    if (c == ']')
      refuse_nodelist(nodelist, "the ']'" + at + " closes no '['");
    if (std::isspace(static_cast<unsigned char>(c)))
      refuse_nodelist(nodelist, "a space" + at);
    if (in_first_entry)
      first += c;
    entry_empty = false;
    ++i;
  }
  return first;
}

node_identity identity_from_environment(const getenv_function& getenv) {
  node_identity out;

  if (read_ranks(getenv, {"troupe", "TROUPE_RANK", "TROUPE_WORLD_SIZE", "TROUPE_LOCAL_RANK"},
                 out)) {
    const auto coordinator = lookup(getenv, "TROUPE_COORDINATOR");
    if (coordinator)
      parse_coordinator(*coordinator, out);
    else if (out.world_size > 1)
      refuse(quoted("TROUPE_WORLD_SIZE", std::to_string(out.world_size)) +
             " but TROUPE_COORDINATOR is not set: expected host:port of rank 0 "
             "(troupe launch sets it)");
    return out;
  }
  // troupe's own variables are never set by accident or by another tool: one without the
  // rank and world size is a broken launch, not something to ignore.
  for (const char* name : {"TROUPE_COORDINATOR", "TROUPE_LOCAL_RANK"})
    if (const auto value = lookup(getenv, name))
      refuse(quoted(name, *value) +
             " is set but TROUPE_RANK and TROUPE_WORLD_SIZE are not: a troupe launch sets all "
             "of them (is the launch script complete?)");

  if (read_ranks(getenv, {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"}, out)) {
    read_master(getenv, out);
    return out;
  }

  if (read_ranks(
          getenv,
          {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
          out)) {
    read_master(getenv, out);
    return out;
  }

  if (read_ranks(getenv, {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}, out)) {
    read_master(getenv, out);
    if (lookup(getenv, "MASTER_ADDR"))
      return out;
    const char* list_name = "SLURM_JOB_NODELIST";
    auto nodelist = lookup(getenv, list_name);
    if (!nodelist) {
      list_name = "SLURM_NODELIST";
      nodelist = lookup(getenv, list_name);
    }
    if (!nodelist) {
      if (out.world_size > 1)
        refuse(quoted("SLURM_NTASKS", std::to_string(out.world_size)) +
               " but neither SLURM_JOB_NODELIST nor SLURM_NODELIST is set, nor MASTER_ADDR: "
               "expected one of them to name the coordinator's host");
      return out;
    }
    try {
      out.coordinator_host = first_slurm_host(*nodelist);
    } catch (const user_error& e) {
      refuse(std::string{list_name} + ": " + e.what());
    }
    return out;
  }

  return out;  // rank 0 of 1, "single"
}

std::string describe(const node_identity& identity) {
  const std::string ranks =
      "rank " + std::to_string(identity.rank) + " of " + std::to_string(identity.world_size);
  if (identity.launcher == "single")
    return ranks + " (single process: no launcher variables set)";
  const bool v6 = identity.coordinator_host.find(':') != std::string::npos;
  std::string out = ranks + " (" + identity.launcher + "), coordinator " +
                    (v6 ? "[" + identity.coordinator_host + "]" : identity.coordinator_host) + ":" +
                    std::to_string(identity.coordinator_port);
  if (identity.local_rank != 0)
    out += ", local rank " + std::to_string(identity.local_rank);
  return out;
}

}  // namespace troupe::net
