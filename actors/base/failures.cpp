// failures.cpp: the shared exception handler of troupe's actors.
#include "actors/base/failures.hpp"

#include "troupe/error.hpp"
#include "troupe/messages.hpp"

namespace troupe {

std::string describe_exception(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

failure_msg failure_of(std::string actor, std::exception_ptr error) {
  bool bad_input = false;
  try {
    std::rethrow_exception(error);
  } catch (const data_error&) {
    bad_input = true;
  } catch (...) {
  }
  return failure_msg{std::move(actor), describe_exception(error), bad_input};
}

void report_failures_to(caf::event_based_actor* self, std::string name, const caf::actor* trainer) {
  self->set_exception_handler(
      [self, name = std::move(name), trainer](std::exception_ptr& error) -> caf::error {
        auto failure = failure_of(name, error);
        auto what = failure.what;
        if (*trainer)
          self->send(*trainer, std::move(failure));
        return caf::make_error(caf::sec::runtime_error, what);
      });
}

}  // namespace troupe
