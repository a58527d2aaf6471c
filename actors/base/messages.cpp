// messages.cpp: registration of troupe's message types with CAF.
#include "troupe/messages.hpp"

#include "actors/base/collective_messages.hpp"

namespace troupe {

namespace {

std::vector<wire_end> ends_of(const std::vector<wire_end>& ends, const std::string& kind) {
  std::vector<wire_end> out;
  for (const auto& e : ends)
    if (e.kind == kind)
      out.push_back(e);
  return out;
}

}  // namespace

std::vector<wire_end> wiring_msg::out(const std::string& kind) const {
  return ends_of(outgoing, kind);
}

std::vector<wire_end> wiring_msg::in(const std::string& kind) const {
  return ends_of(incoming, kind);
}

void add_message_types(caf::actor_system_config& config) {
  config.add_message_type<tensor>("troupe::tensor");
  config.add_message_type<std::vector<tensor>>("std::vector<troupe::tensor>");
  config.add_message_type<std::vector<std::int64_t>>("std::vector<int64_t>");  // staleness
  config.add_message_type<micro_tag>("troupe::micro_tag");
  config.add_message_type<activation_msg>("troupe::activation_msg");
  config.add_message_type<gradient_msg>("troupe::gradient_msg");
  config.add_message_type<labels_msg>("troupe::labels_msg");
  config.add_message_type<weight_grads_msg>("troupe::weight_grads_msg");
  config.add_message_type<params_msg>("troupe::params_msg");
  config.add_message_type<ring_msg>("troupe::ring_msg");
  config.add_message_type<shard_msg>("troupe::shard_msg");
  config.add_message_type<release_msg>("troupe::release_msg");
  config.add_message_type<wire_end>("troupe::wire_end");
  config.add_message_type<wiring_msg>("troupe::wiring_msg");
  config.add_message_type<loss_report_msg>("troupe::loss_report_msg");
  config.add_message_type<failure_msg>("troupe::failure_msg");
}

}  // namespace troupe
