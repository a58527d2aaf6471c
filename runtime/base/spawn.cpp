// spawn.cpp: see spawn.hpp, Note [spawn, not fork].
#include "runtime/base/spawn.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

extern char** environ;

namespace troupe {

namespace {

// posix_spawn's attributes and file actions, destroyed however we leave.
struct spawn_setup {
  posix_spawnattr_t attributes;
  posix_spawn_file_actions_t actions;
  spawn_setup() {
    posix_spawnattr_init(&attributes);
    posix_spawn_file_actions_init(&actions);
  }
  ~spawn_setup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
  spawn_setup(const spawn_setup&) = delete;
  spawn_setup& operator=(const spawn_setup&) = delete;
};

std::string variable_name(const char* entry) {
  const char* equals = entry;
  while (*equals != '\0' && *equals != '=')
    ++equals;
  return {entry, equals};
}

// This process's environment less what the child must not have, then what it is given.
std::vector<std::string> child_environment(const spawn_options& options) {
  std::vector<std::string> out;
  auto replaced = [&](const std::string& name) {
    return std::find(options.unset_environment.begin(), options.unset_environment.end(), name) !=
               options.unset_environment.end() ||
           std::any_of(options.set_environment.begin(), options.set_environment.end(),
                       [&](const auto& variable) { return variable.first == name; });
  };
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry)
    if (!replaced(variable_name(*entry)))
      out.emplace_back(*entry);
  for (const auto& [name, value] : options.set_environment)
    out.push_back(name + "=" + value);
  return out;
}

std::vector<char*> pointers(std::vector<std::string>& text) {
  std::vector<char*> out;
  for (auto& t : text)
    out.push_back(t.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

pid_t spawn_process(const std::string& program, const std::vector<std::string>& arguments,
                    const spawn_options& options) {
  std::vector<std::string> argv_text{program};
  argv_text.insert(argv_text.end(), arguments.begin(), arguments.end());
  auto environment_text = child_environment(options);
  auto argv = pointers(argv_text);
  auto envp = pointers(environment_text);

  spawn_setup setup;
  if (options.own_process_group) {
    posix_spawnattr_setflags(&setup.attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&setup.attributes, 0);
  }
  if (!options.output.empty()) {
    posix_spawn_file_actions_addopen(&setup.actions, 1, options.output.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&setup.actions, 1, 2);
  }
  pid_t pid = -1;
  // glibc's posix_spawn reports a failed exec (a missing program, a file it cannot open
  // for the output) as its result, not as a child that exits 127.
  int failed = ::posix_spawn(&pid, program.c_str(), &setup.actions, &setup.attributes, argv.data(),
                             envp.data());
  if (failed != 0)
    throw std::system_error(failed, std::generic_category(), "cannot start " + program);
  return pid;
}

int exit_code_of_status(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int wait_for_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      throw std::system_error(errno, std::generic_category(),
                              "waiting for process " + std::to_string(pid));
  return exit_code_of_status(status);
}

std::string own_executable() {
  std::string path(4096, '\0');
  auto length = ::readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (length <= 0)
    throw std::system_error(errno, std::generic_category(),
                            "cannot find this program's own executable (/proc/self/exe)");
  path.resize(static_cast<std::size_t>(length));
  return path;
}

}  // namespace troupe
