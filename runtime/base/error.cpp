// error.cpp: error formatting and the "did you mean" helper.
#include "troupe/error.hpp"

#include <algorithm>

namespace troupe {

std::string source_position::to_string() const {
  std::string out = file.empty() ? std::string{"<input>"} : file;
  if (line > 0) {
    out += ":" + std::to_string(line);
    if (column > 0)
      out += ":" + std::to_string(column);
  }
  return out;
}

namespace {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> previous(b.size() + 1), current(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    previous[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      auto substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

}  // namespace

std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  auto best_distance = std::string::npos;
  for (const auto& candidate : candidates) {
    auto d = edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  // A plausible typo: at most a third of the word changed (and at least one edit allowed).
  auto limit = std::max<std::size_t>(2, word.size() / 3);
  return best_distance <= limit ? best : std::string{};
}

std::string nearest_name(const std::string& word,
                         const std::initializer_list<std::string>& candidates) {
  return nearest_name(word, std::vector<std::string>(candidates));
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  auto near = nearest_name(word, candidates);
  return near.empty() ? std::string{} : "; did you mean '" + near + "'?";
}

std::string comma_list(const std::vector<std::string>& names) {
  std::string list;
  for (const auto& n : names)
    list += (list.empty() ? "" : ", ") + n;
  return list;
}

}  // namespace troupe
