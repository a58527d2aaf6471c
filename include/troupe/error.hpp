// error.hpp: the two tiers of errors (STYLE.md "Errors").
//
// - Expected failures a user can act on (a bad config, a bad data file, a lost node)
//   are exceptions derived from troupe::user_error; the CLI prints what() and exits
//   with the error's exit code (exit_code::bad_input unless it says otherwise).
// - Programmer errors go through TROUPE_CHECK, which throws troupe::check_failure with
//   file, line, the failed condition and a message.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "troupe/check.hpp"  // TROUPE_CHECK, check_failure
#include "troupe/exit_code.hpp"

namespace troupe {

/// A place in a source file (a config), 1-based. line == 0 means "whole file".
struct source_position {
  std::string file;
  int line = 0;
  int column = 0;

  /// "file:line:col", "file:line" or "file".
  std::string to_string() const;
};

/// An error in the user's input; what() is the whole message a user sees.
class user_error : public std::runtime_error {
 public:
  explicit user_error(const std::string& message,
                      troupe::exit_code code = troupe::exit_code::bad_input)
      : std::runtime_error(message), exit_code_(code) {}
  troupe::exit_code exit_code() const noexcept { return exit_code_; }

 private:
  troupe::exit_code exit_code_;
};

/// A config error: "file:line:col: message".
class config_error : public user_error {
 public:
  config_error(source_position where, const std::string& message)
      : user_error(where.to_string() + ": " + message), where_(std::move(where)) {}
  const source_position& where() const noexcept { return where_; }

 private:
  source_position where_;
};

/// A data file that cannot be read: names the file and, where known, the byte offset.
class data_error : public user_error {
 public:
  using user_error::user_error;
};

/// Of `candidates`, the one nearest to `word` by edit distance, or "" if none is close
/// enough to be a plausible typo.
std::string nearest_name(const std::string& word,
                         const std::initializer_list<std::string>& candidates);
std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates);

/// "; did you mean 'x'?" or "" when nothing is near.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

/// "a, b, c": the names a message lists as valid or registered.
std::string comma_list(const std::vector<std::string>& names);

}  // namespace troupe
