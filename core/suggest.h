// "Did you mean ...?": close matches by edit distance, for policy names, keywords, class names
// and module paths typed by a user (the --policy parser in policies/, the tools' messages).
#pragma once

#include <string>
#include <vector>

namespace fsdp {

// Levenshtein distance (insert, delete, substitute; case-sensitive).
std::size_t edit_distance(const std::string& a, const std::string& b);

// Candidates within a distance proportional to the word's length (at least 1, at most 4; a
// case-insensitive equal name always qualifies), closest first, at most `limit`.
std::vector<std::string> close_matches(const std::string& word,
                                       const std::vector<std::string>& candidates,
                                       std::size_t limit = 3);

// " (did you mean 'a' or 'b'?)" or "" when nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace fsdp
