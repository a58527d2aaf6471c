// watchdog.cpp: the progress clock and the status round of Note [watchdog].
#include "actors/trainer/watchdog.hpp"

#include <algorithm>
#include <memory>

#include "troupe/messages.hpp"

namespace troupe {

std::chrono::milliseconds watchdog::interval() const {
  auto ms = static_cast<long>(seconds_ * 1000 / 4);
  return std::chrono::milliseconds(std::max(10L, std::min(1000L, ms)));
}

void watchdog::start(clock::time_point now) {
  last_progress_ = 0;
  last_progress_time_ = now;
}

double watchdog::observe(std::uint64_t progress, clock::time_point now) {
  if (progress != last_progress_) {
    last_progress_ = progress;
    last_progress_time_ = now;
  }
  return std::chrono::duration<double>(now - last_progress_time_).count();
}

std::string watchdog_report(double quiet_seconds, const std::vector<std::string>& answers) {
  std::string text = "watchdog: nothing has moved for " +
                     std::to_string(static_cast<int>(quiet_seconds)) +
                     " s, so the run is stuck; what each actor is waiting for:";
  for (const auto& line : answers)
    text += "\n  " + line;
  return text;
}

void ask_actors(caf::event_based_actor* self,
                const std::vector<std::pair<std::string, caf::actor>>& actors,
                std::function<void(const std::vector<std::string>&)> done) {
  if (actors.empty())
    return done({});
  auto answers = std::make_shared<std::vector<std::string>>(actors.size());
  auto left = std::make_shared<std::size_t>(actors.size());
  auto finish =
      std::make_shared<std::function<void(const std::vector<std::string>&)>>(std::move(done));
  for (std::size_t i = 0; i < actors.size(); ++i) {
    const auto& [name, handle] = actors[i];
    self->request(handle, std::chrono::seconds(2), status_atom::value)
        .then(
            [answers, left, finish, i](const std::string& status) {
              (*answers)[i] = status;
              if (--*left == 0)
                (*finish)(*answers);
            },
            [answers, left, finish, i, name = name](caf::error&) {
              (*answers)[i] = name + ": did not answer (busy or dead)";
              if (--*left == 0)
                (*finish)(*answers);
            });
  }
}

}  // namespace troupe
