// launch_env.hpp: who this process is in a multi-process run (its rank, the world size,
// its rank on its machine, where the coordinator listens), read from the variables the
// user's launcher sets: troupe's own (`troupe launch`), torchrun's, Open MPI's mpirun's or
// Slurm's srun's. A process started by none of them is a single-process run.
//
//   const auto me = troupe::net::identity_from_environment();
//   std::cerr << troupe::net::describe(me) << "\n";
//   // "rank 1 of 2 (torchrun), coordinator 10.0.0.5:29500"
//
// Not here: connecting to the coordinator, the shared secret (secret.hpp), agreeing on the
// config (config_identity.hpp), choosing a device from the local rank. Nothing here knows
// about CAF or actors; it reads strings and checks them.
#pragma once

#include <stdlib.h>  // ::getenv, the default source of the variables

#include <functional>
#include <string>
#include <string_view>

namespace troupe::net {

/// The coordinator's port when the launcher names none: torchrun's default, so that a
/// troupe run and a PyTorch run started the same way find the same port.
inline constexpr int default_coordinator_port = 29500;
/// The coordinator's host when the launcher names none: this machine.
inline constexpr const char* default_coordinator_host = "127.0.0.1";
/// The largest world size accepted; a larger one is taken for a mistyped variable.
inline constexpr int max_world_size = 4096;

/// One process's place in a run.
struct node_identity {
  int rank = 0;        // 0 .. world_size - 1; rank 0 is the coordinator
  int world_size = 1;  // processes in the run, >= 1
  int local_rank = 0;  // rank among the processes on this machine (0 where the launcher says none)
  std::string coordinator_host = default_coordinator_host;
  int coordinator_port = default_coordinator_port;  // 1 .. 65535
  /// Whose variables these came from: "troupe", "torchrun", "openmpi", "slurm" or "single".
  std::string launcher = "single";
};

/// Reads this process's identity from the environment through `getenv` (a name to its
/// value, or nullptr when unset; tests pass their own). The first convention with its
/// variables set wins, in this order (Note [which launcher] in launch_env.cpp says why):
///
/// - troupe:   TROUPE_RANK, TROUPE_WORLD_SIZE, TROUPE_COORDINATOR ("host:port" or
///             "[v6]:port"; required when the world size is above 1), TROUPE_LOCAL_RANK;
/// - torchrun: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK;
/// - openmpi:  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK, and
///             MASTER_ADDR, MASTER_PORT;
/// - slurm:    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the host is MASTER_ADDR if set,
///             else the first host of SLURM_JOB_NODELIST (or SLURM_NODELIST); MASTER_PORT;
/// - none of them: rank 0 of 1, launcher "single".
///
/// A convention is in use when its rank or its world size is set (for Slurm, SLURM_PROCID;
/// SLURM_NTASKS alone is a batch script, not a task; for troupe, any TROUPE_ variable
/// above); then both must be. An unset local rank
/// is 0, an unset host default_coordinator_host, an unset port default_coordinator_port.
///
/// Throws user_error naming the variable, its value and what was expected when a value is
/// not a whole number, is negative, the rank is not below the world size, the world size is
/// not within 1 .. max_world_size, the port not within 1 .. 65535, a convention is half set
/// (a rank without a world size, or the reverse), or a node list is empty or malformed.
node_identity identity_from_environment(
    const std::function<const char*(const char*)>& getenv = ::getenv);

/// The first host of a Slurm host list: comma-separated entries, each a name with bracketed
/// range lists in it, e.g. "node[01-04,07],gpu5" -> "node01", "rack1-n[009-012]" ->
/// "rack1-n009" (zero padding kept), "c[1-2]-ib" -> "c1-ib", "a-1,b" -> "a-1". The whole list
/// is checked; throws user_error quoting it and saying what is wrong where when it is empty,
/// has an empty entry, unbalanced or nested brackets, or a range that is not "N" or "N-M"
/// with N <= M.
std::string first_slurm_host(std::string_view nodelist);

/// One line for logs: "rank 1 of 2 (torchrun), coordinator 127.0.0.1:29500", with
/// ", local rank N" after it when N is not 0; "rank 0 of 1 (single process: no launcher
/// variables set)" for a single-process run.
std::string describe(const node_identity& identity);

}  // namespace troupe::net
