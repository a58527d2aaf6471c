// interrupts.cpp: the signal handlers (async-signal-safe: an atomic store, or _exit).
#include "actors/trainer/interrupts.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace troupe {

namespace {

std::atomic<int> requested{0};
static_assert(std::atomic<int>::is_always_lock_free,
              "a signal handler may only touch lock-free atomics");

extern "C" void on_interrupt(int signal) {
  int none = 0;
  if (!requested.compare_exchange_strong(none, signal)) {
    // The second one: at once, saying so (write(2) and _exit are async-signal-safe).
    static const char said[] =
        "troupe: a second signal: exiting at once, without finishing the step or a checkpoint\n";
    [[maybe_unused]] const auto ignored = write(STDERR_FILENO, said, sizeof(said) - 1);
    _exit(128 + signal);
  }
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int interrupt_signal() { return requested.load(); }

void set_interrupt_signal(int signal) { requested.store(signal); }

}  // namespace troupe
