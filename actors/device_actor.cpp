// device_actor.cpp: the protocol every device-placed actor shares (see the header).
#include "troupe/device_actor.hpp"

#include <atomic>

#include "actors/failures.hpp"
#include "troupe/check.hpp"

namespace troupe {

namespace {
std::atomic<std::uint32_t> sources{0};
}  // namespace

device_actor::device_actor(caf::actor_config& config, std::string name, device* on)
    : caf::event_based_actor(config),
      name_(std::move(name)),
      on_(on),
      source_(sources.fetch_add(1, std::memory_order_relaxed) + 1) {}

caf::behavior device_actor::make_behavior() {
  // An exception in any handler (or in connect) ends the run through the trainer, naming
  // this actor; the actor then exits with that error (actors/failures.hpp).
  set_exception_handler([this](std::exception_ptr& error) -> caf::error {
    auto what = describe_exception(error);
    if (trainer_)
      send(trainer_, failure_msg{name_, what});
    return caf::make_error(caf::sec::runtime_error, what);
  });
  attach_functor([this] {
    trainer_ = nullptr;
    release_peers();
  });
  return caf::behavior{handlers().or_else(
      [this](const wiring_msg& wiring) {
        // The trainer takes failures and loss reports, whatever else it handles: the
        // typed handle says so at every send (Note [typed handles] in messages.hpp).
        trainer_ = caf::actor_cast<trainer_handle>(wiring.trainer);
        track_ = wiring.track;
        connect(wiring);
      },
      [this](status_atom) { return status(); }, [this](finish_atom) { quit(); })};
}

void device_actor::connect(const wiring_msg&) {}

void device_actor::release_peers() {}

std::string device_actor::role() const { return {}; }

std::string device_actor::waiting_for() const { return {}; }

std::string device_actor::status() const {
  const auto what = role();
  return name_ + " (" + (what.empty() ? "" : what + " ") + "on " +
         (on_ != nullptr ? on_->id().to_string() : std::string{"the host"}) + ")" + waiting_for();
}

wire_end device_actor::single_end(const std::vector<wire_end>& ends, const char* what) const {
  TROUPE_CHECK(ends.size() == 1, name_ << " needs one " << what << ", has " << ends.size());
  return ends.front();
}

device& device_actor::on() const {
  TROUPE_CHECK(on_ != nullptr, name_ << " runs on the host and has no device");
  return *on_;
}

}  // namespace troupe
