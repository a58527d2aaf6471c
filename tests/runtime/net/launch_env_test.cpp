// launch_env_test.cpp: a process's identity read from each launcher's variables (troupe's,
// torchrun's, Open MPI's, Slurm's), the order in which they win, the refusals of values
// that cannot be right (each naming the variable, its value and what was expected), and
// Slurm's host list syntax. The environment is a map passed in: the real one is not touched.
#include "runtime/net/launch_env.hpp"

#include <doctest/doctest.h>

#include <map>
#include <string>

#include "tests/text_checks.hpp"
#include "troupe/error.hpp"

using namespace troupe;
using namespace troupe::net;

namespace {

using environment = std::map<std::string, std::string>;

node_identity identity_from(const environment& variables) {
  return identity_from_environment([&](const char* name) -> const char* {
    const auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  });
}

using troupe::test::user_error_of;

std::string refusal_of(const environment& variables) {
  return user_error_of([&] { identity_from(variables); });
}

using troupe::test::contains;

}  // namespace

TEST_CASE("with no launcher variables a process runs alone as rank 0 of 1") {
  const auto me = identity_from({{"HOME", "/root"}, {"MASTER_ADDR", "10.0.0.9"}});
  CHECK(me.rank == 0);
  CHECK(me.world_size == 1);
  CHECK(me.local_rank == 0);
  CHECK(me.launcher == "single");
  CHECK(describe(me) == "rank 0 of 1 (single process: no launcher variables set)");
}

TEST_CASE("troupe's variables give the rank, world size, local rank and coordinator") {
  const auto me = identity_from({{"TROUPE_RANK", "3"},
                                 {"TROUPE_WORLD_SIZE", "4"},
                                 {"TROUPE_LOCAL_RANK", "1"},
                                 {"TROUPE_COORDINATOR", "node01:31000"}});
  CHECK(me.launcher == "troupe");
  CHECK(me.rank == 3);
  CHECK(me.world_size == 4);
  CHECK(me.local_rank == 1);
  CHECK(me.coordinator_host == "node01");
  CHECK(me.coordinator_port == 31000);
  CHECK(describe(me) == "rank 3 of 4 (troupe), coordinator node01:31000, local rank 1");
}

TEST_CASE("TROUPE_COORDINATOR takes an IPv6 address in brackets") {
  const auto me = identity_from({{"TROUPE_RANK", "0"},
                                 {"TROUPE_WORLD_SIZE", "2"},
                                 {"TROUPE_COORDINATOR", "[fd00::1]:29501"}});
  CHECK(me.coordinator_host == "fd00::1");
  CHECK(me.coordinator_port == 29501);
  CHECK(describe(me) == "rank 0 of 2 (troupe), coordinator [fd00::1]:29501");
}

TEST_CASE("a troupe world of one needs no coordinator, a larger one does") {
  const auto alone = identity_from({{"TROUPE_RANK", "0"}, {"TROUPE_WORLD_SIZE", "1"}});
  CHECK(alone.launcher == "troupe");
  CHECK(alone.coordinator_host == "127.0.0.1");
  CHECK(alone.coordinator_port == default_coordinator_port);
  const auto message = refusal_of({{"TROUPE_RANK", "0"}, {"TROUPE_WORLD_SIZE", "2"}});
  CHECK(contains(message, "TROUPE_COORDINATOR is not set"));
  CHECK(contains(message, "host:port"));
}

TEST_CASE("a malformed TROUPE_COORDINATOR is refused with what was expected") {
  for (const std::string value : {"node01", "node01:", ":29500", "fd00::1:29500", "[fd00::1]",
                                  "node01:http", "node01:0", "node 01:29500"}) {
    INFO("TROUPE_COORDINATOR=" << value);
    const auto message = refusal_of(
        {{"TROUPE_RANK", "0"}, {"TROUPE_WORLD_SIZE", "2"}, {"TROUPE_COORDINATOR", value}});
    CHECK(contains(message, "TROUPE_COORDINATOR"));
    CHECK(contains(message, value));
    CHECK(contains(message, "expected"));
  }
}

TEST_CASE(
    "torchrun's variables give the identity, and MASTER_ADDR and MASTER_PORT the coordinator") {
  const auto me = identity_from({{"RANK", "1"},
                                 {"WORLD_SIZE", "2"},
                                 {"LOCAL_RANK", "0"},
                                 {"MASTER_ADDR", "10.0.0.5"},
                                 {"MASTER_PORT", "29400"}});
  CHECK(me.launcher == "torchrun");
  CHECK(me.rank == 1);
  CHECK(me.world_size == 2);
  CHECK(me.coordinator_host == "10.0.0.5");
  CHECK(me.coordinator_port == 29400);
  CHECK(describe(me) == "rank 1 of 2 (torchrun), coordinator 10.0.0.5:29400");
}

TEST_CASE("without MASTER_ADDR and MASTER_PORT the coordinator is torchrun's default") {
  const auto me = identity_from({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  CHECK(me.coordinator_host == "127.0.0.1");
  CHECK(me.coordinator_port == 29500);
  CHECK(me.local_rank == 0);
  CHECK(describe(me) == "rank 1 of 2 (torchrun), coordinator 127.0.0.1:29500");
}

TEST_CASE("Open MPI's variables give the identity, the host from MASTER_ADDR or this machine") {
  const auto me = identity_from({{"OMPI_COMM_WORLD_RANK", "5"},
                                 {"OMPI_COMM_WORLD_SIZE", "8"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  CHECK(me.launcher == "openmpi");
  CHECK(me.rank == 5);
  CHECK(me.world_size == 8);
  CHECK(me.local_rank == 1);
  CHECK(me.coordinator_host == "127.0.0.1");
  CHECK(me.coordinator_port == 29500);
  const auto named = identity_from({{"OMPI_COMM_WORLD_RANK", "5"},
                                    {"OMPI_COMM_WORLD_SIZE", "8"},
                                    {"MASTER_ADDR", "head"},
                                    {"MASTER_PORT", "40000"}});
  CHECK(named.coordinator_host == "head");
  CHECK(named.coordinator_port == 40000);
}

TEST_CASE("Slurm's variables give the identity, the host the first of the job's node list") {
  const environment slurm{{"SLURM_PROCID", "2"},
                          {"SLURM_NTASKS", "4"},
                          {"SLURM_LOCALID", "0"},
                          {"SLURM_JOB_NODELIST", "gpu[07-08],cpu1"}};
  const auto me = identity_from(slurm);
  CHECK(me.launcher == "slurm");
  CHECK(me.rank == 2);
  CHECK(me.world_size == 4);
  CHECK(me.coordinator_host == "gpu07");
  CHECK(me.coordinator_port == 29500);

  auto older = slurm;
  older.erase("SLURM_JOB_NODELIST");
  older["SLURM_NODELIST"] = "a-1,b";
  CHECK(identity_from(older).coordinator_host == "a-1");

  auto named = slurm;
  named["MASTER_ADDR"] = "login-node";
  named["MASTER_PORT"] = "29600";
  CHECK(identity_from(named).coordinator_host == "login-node");
  CHECK(identity_from(named).coordinator_port == 29600);
}

TEST_CASE("SLURM_NTASKS without SLURM_PROCID is a batch script, not a task: a single run") {
  CHECK(identity_from({{"SLURM_NTASKS", "4"}, {"SLURM_JOB_NODELIST", "n[1-4]"}}).launcher ==
        "single");
}

TEST_CASE("a Slurm task whose node list is empty or malformed is refused, naming the variable") {
  auto message =
      refusal_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_NODELIST", ""}});
  CHECK(contains(message, "SLURM_JOB_NODELIST"));
  CHECK(contains(message, "empty"));
  message = refusal_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NODELIST", "n[1-2"}});
  CHECK(contains(message, "SLURM_NODELIST"));
  CHECK(contains(message, "'n[1-2'"));
  message = refusal_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});
  CHECK(contains(message, "SLURM_JOB_NODELIST"));
  CHECK(contains(message, "MASTER_ADDR"));
}

TEST_CASE("the innermost launcher wins: troupe, then torchrun, then Open MPI, then Slurm") {
  environment all{{"TROUPE_RANK", "1"},           {"TROUPE_WORLD_SIZE", "16"},
                  {"TROUPE_COORDINATOR", "h:1"},  {"RANK", "2"},
                  {"WORLD_SIZE", "16"},           {"OMPI_COMM_WORLD_RANK", "3"},
                  {"OMPI_COMM_WORLD_SIZE", "16"}, {"SLURM_PROCID", "4"},
                  {"SLURM_NTASKS", "16"},         {"SLURM_JOB_NODELIST", "n1"}};
  CHECK(identity_from(all).launcher == "troupe");
  all.erase("TROUPE_RANK");
  all.erase("TROUPE_WORLD_SIZE");
  all.erase("TROUPE_COORDINATOR");
  CHECK(identity_from(all).launcher == "torchrun");
  CHECK(identity_from(all).rank == 2);
  all.erase("RANK");
  all.erase("WORLD_SIZE");
  // mpirun inside a Slurm allocation: the inherited SLURM_PROCID is the node's, not ours.
  CHECK(identity_from(all).launcher == "openmpi");
  CHECK(identity_from(all).rank == 3);
  all.erase("OMPI_COMM_WORLD_RANK");
  all.erase("OMPI_COMM_WORLD_SIZE");
  CHECK(identity_from(all).launcher == "slurm");
  CHECK(identity_from(all).rank == 4);
}

TEST_CASE("a half-set convention is refused, naming the variable set and the one missing") {
  const std::map<std::string, std::string> missing_for{
      {"TROUPE_RANK", "TROUPE_WORLD_SIZE"},
      {"TROUPE_WORLD_SIZE", "TROUPE_RANK"},
      {"RANK", "WORLD_SIZE"},
      {"WORLD_SIZE", "RANK"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
      {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (const auto& pair : missing_for) {
    // Named references, not a binding: INFO's lambda captures them (clang 14).
    const auto& set = pair.first;
    const auto& missing = pair.second;
    INFO(set << " without " << missing);
    const auto message = refusal_of({{set, "1"}});
    CHECK(contains(message, set + "='1' is set but " + missing + " is not"));
  }
}

TEST_CASE("troupe's coordinator or local rank without its rank and world size is refused") {
  for (const std::string name : {"TROUPE_COORDINATOR", "TROUPE_LOCAL_RANK"}) {
    INFO(name);
    const auto message = refusal_of({{name, "1"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}});
    CHECK(contains(message, name + "='1' is set but TROUPE_RANK and TROUPE_WORLD_SIZE are not"));
  }
}

TEST_CASE("a rank, world size or port that cannot be right is refused with what was expected") {
  struct refusal {
    environment variables;
    std::string expected_part;
  };
  const refusal refusals[] = {
      {{{"RANK", "one"}, {"WORLD_SIZE", "2"}}, "RANK='one' is not a whole number"},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, "RANK='-1' is negative: expected a rank from 0 to 1"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK='2' is not below WORLD_SIZE='2'"},
      {{{"RANK", ""}, {"WORLD_SIZE", "2"}}, "RANK='' is empty"},
      {{{"RANK", " 1"}, {"WORLD_SIZE", "2"}}, "RANK=' 1' is not a whole number"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}},
       "WORLD_SIZE='0' is out of range: expected the number of processes in the run, from 1 to "
       "4096"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "4097"}}, "WORLD_SIZE='4097' is out of range"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "99999999999999999999"}},
       "WORLD_SIZE='99999999999999999999' is out of range"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "2"}}, "LOCAL_RANK='2' is out of range"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "0"}},
       "MASTER_PORT='0' is out of range: expected a TCP port from 1 to 65535"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "65536"}},
       "MASTER_PORT='65536' is out of range"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "29500x"}},
       "MASTER_PORT='29500x' is not a whole number"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", ""}}, "MASTER_ADDR='' names no host"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "x"}}, "SLURM_NTASKS='x' is not a whole number"},
      {{{"OMPI_COMM_WORLD_RANK", "0"},
        {"OMPI_COMM_WORLD_SIZE", "2"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "-3"}},
       "OMPI_COMM_WORLD_LOCAL_RANK='-3' is negative"},
  };
  for (const auto& r : refusals) {
    const auto message = refusal_of(r.variables);
    INFO(message);
    CHECK(contains(message, r.expected_part));
    CHECK(contains(message, "launch environment: "));
  }
}

TEST_CASE("the first host of a Slurm node list keeps its zero padding and its suffix") {
  CHECK(first_slurm_host("node[01-04,07],gpu5") == "node01");
  CHECK(first_slurm_host("a-1,b") == "a-1");
  CHECK(first_slurm_host("n[3]") == "n3");
  CHECK(first_slurm_host("rack1-n[009-012]") == "rack1-n009");
  CHECK(first_slurm_host("c[1-2]-ib") == "c1-ib");
  CHECK(first_slurm_host("rack[2-3]-n[01-04]") == "rack2-n01");
  CHECK(first_slurm_host("solo") == "solo");
  CHECK(first_slurm_host("n[7,1-3]") == "n7");  // the first as written, not the smallest
  CHECK(first_slurm_host("gpu5,node[01-04]") == "gpu5");
}

TEST_CASE("a malformed Slurm node list is refused, saying what is wrong where") {
  struct refusal {
    std::string nodelist;
    std::string expected_part;
  };
  const refusal refusals[] = {
      {"", "it is empty"},
      {"node[01-04", "the '[' at character 5 is never closed"},
      {"node01]", "the ']' at character 7 closes no '['"},
      {"n[1-[2]]", "a '[' inside the brackets opened at character 2"},
      {"n[]", "an empty range list in the brackets at character 2"},
      {"n[1-]", "'1-' in the brackets at character 2 is not N or N-M"},
      {"n[a-b]", "'a-b' in the brackets at character 2 is not N or N-M"},
      {"n[1,]", "'' in the brackets at character 2 is not N or N-M"},
      {"n[4-2]", "the range '4-2' in the brackets at character 2 runs backwards"},
      {"a,,b", "an empty entry at character 3"},
      {",a", "an empty entry at character 1"},
      {"a,", "an empty entry at character 3"},
      {"a b", "a space at character 2"},
      {"n[1-3],m[2", "never closed"},  // checked past the first entry too
  };
  for (const auto& r : refusals) {
    const auto message = user_error_of([&] { first_slurm_host(r.nodelist); });
    INFO(message);
    CHECK(contains(message, "Slurm node list '" + r.nodelist + "' is malformed: "));
    CHECK(contains(message, r.expected_part));
    CHECK(contains(message, "expected comma-separated hosts"));
  }
}
