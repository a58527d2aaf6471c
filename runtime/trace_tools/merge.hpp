// merge.hpp: one Chrome trace from the traces of every node of a run.
//
// Each node of a run over several processes records its own trace against its own clock
// (runtime/trace). The coordinator collects them and merges them here into one file that
// Perfetto, `troupe trace summary` and `troupe trace timeline` read like any other: every
// node's devices stay processes of their own (a node's host process is renamed
// "nodeK host"), its timestamps move onto node0's clock by the offset measured when it
// joined, and its tracks are appended to the track list. Flow ids are already unique per
// node (recorder_settings::flow_base), so the arrows of messages between nodes join.
//
// Not here: measuring the offsets (actors/session/cluster.cpp), or recording.
#pragma once

#include <string>
#include <vector>

namespace troupe::trace {

/// A worker's trace and how its clock relates to node0's.
struct node_trace {
  int node = 0;
  std::string json;      // as recorder::json() wrote it
  double offset_us = 0;  // node0's clock minus this node's, at the same moment
  double rtt_us = 0;     // the round trip the offset was measured with (its uncertainty)
  std::string where;     // "host pid N", for the metadata
};

/// node0's trace with every worker's merged in. otherData gains "nodes": per node its
/// offset, round trip and where it ran, and "clock": how they were aligned. Throws
/// user_error if a trace is not JSON.
std::string merge_node_traces(const std::string& coordinator_json,
                              const std::vector<node_trace>& workers);

}  // namespace troupe::trace
