// failures.cpp: the shared exception handler of troupe's actors.
#include "actors/base/failures.hpp"

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

void report_failures_to(caf::event_based_actor* self, std::string name, const caf::actor* trainer) {
  self->set_exception_handler(
      [self, name = std::move(name), trainer](std::exception_ptr& error) -> caf::error {
        auto what = describe_exception(error);
        if (*trainer)
          self->send(*trainer, failure_msg{name, what});
        return caf::make_error(caf::sec::runtime_error, what);
      });
}

}  // namespace troupe
