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

// Note [bounded suggestions]
// The edit distance costs |word| x |candidate|: a megabyte-long name against a list of them
// ran for minutes before its error could be said. A suggestion is for a typo in a name a
// person wrote, so a word or a candidate longer than max_suggested_length is not compared,
// and neither is a candidate whose length alone puts it past the allowed distance.
constexpr std::size_t max_suggested_length = 64;

std::string nearest_name(const std::string& word, const std::vector<std::string>& candidates) {
  if (word.size() > max_suggested_length)
    return {};
  // A plausible typo: at most a third of the word changed (and at least one edit allowed).
  const auto limit = std::max<std::size_t>(2, word.size() / 3);
  std::string best;
  auto best_distance = std::string::npos;
  for (const auto& candidate : candidates) {
    if (candidate.size() > max_suggested_length ||
        std::max(candidate.size(), word.size()) - std::min(candidate.size(), word.size()) > limit)
      continue;
    auto d = edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
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
  // Bounded as every echo of user text is: a CSV of 60,000 columns made a 3 MB message.
  constexpr std::size_t max_names = 32;
  constexpr std::size_t max_name_length = 80;
  std::string list;
  for (std::size_t i = 0; i < names.size() && i < max_names; ++i) {
    const auto& n = names[i];
    auto cut = std::min(n.size(), max_name_length);
    while (cut < n.size() && cut > 0 && (static_cast<unsigned char>(n[cut]) & 0xC0) == 0x80)
      --cut;  // at a UTF-8 character's first byte
    list += (list.empty() ? "" : ", ") + n.substr(0, cut);
    if (cut < n.size())
      list += "... (" + std::to_string(n.size()) + " bytes)";
  }
  if (names.size() > max_names)
    list += ", ... (" + std::to_string(names.size()) + " in all)";
  return list;
}

}  // namespace troupe
