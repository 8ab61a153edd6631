#include "core/suggest.h"

#include <algorithm>
#include <cctype>
#include <set>

namespace fsdp {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

static std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> close_matches(const std::string& word,
                                       const std::vector<std::string>& candidates,
                                       std::size_t limit) {
  // Two fifths of the word's length tolerates one typo in short names and a dropped part
  // ("min_params" for "min_num_params") in long ones.
  const std::size_t max_dist = std::clamp<std::size_t>(word.size() * 2 / 5, 1, 4);
  const std::string lw = lower(word);
  std::vector<std::pair<std::size_t, std::string>> scored;
  std::set<std::string> seen;
  for (const auto& c : candidates) {
    if (c == word || !seen.insert(c).second) continue;
    std::size_t d = lower(c) == lw ? 0 : edit_distance(lw, lower(c));
    if (d <= max_dist) scored.emplace_back(d, c);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (auto& [d, c] : scored) {
    if (out.size() == limit) break;
    out.push_back(c);
  }
  return out;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  auto m = close_matches(word, candidates);
  if (m.empty()) return "";
  std::string s = " (did you mean ";
  for (std::size_t i = 0; i < m.size(); ++i) {
    if (i > 0) s += i + 1 == m.size() ? " or " : ", ";
    s += "'" + m[i] + "'";
  }
  return s + "?)";
}

}  // namespace fsdp
