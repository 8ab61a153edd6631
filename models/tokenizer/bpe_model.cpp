#include "models/tokenizer/bpe_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/input_error.h"
#include "models/tokenizer/json_place.h"
#include "models/tokenizer/utf8.h"

namespace fsdp::models {

using nlohmann::json;

namespace {
// Words cached at most; after that new words are merged each time (tokenizers does the same).
constexpr std::size_t kCacheWords = 1u << 20;
constexpr std::size_t kCacheWordBytes = 256;  // longer words are rare and not worth keeping
}  // namespace

struct BpeModel::Cache {
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<std::uint32_t>, StringHash, std::equal_to<>> words;
};

BpeModel::BpeModel() : cache_(std::make_unique<Cache>()) {}
BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

BpeModel BpeModel::from_json(const json& value, const JsonPlace& place) {
  const std::string& type = (place / "type").as_string(place.at(value, "type"));
  if (type != "BPE") (place / "type").unsupported(value["type"], "BPE only");
  place.check_keys(
      value, {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
              "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"});
  auto must_be = [&](const char* key, auto&& ok, const char* supported) {
    if (value.contains(key) && !ok(value[key])) (place / key).unsupported(value[key], supported);
  };
  auto null_or_empty = [](const json& v) { return v.is_null() || v == json(""); };
  must_be(
      "dropout", [](const json& v) { return v.is_null(); }, "null only");
  must_be("continuing_subword_prefix", null_or_empty, "null or \"\" only");
  must_be("end_of_word_suffix", null_or_empty, "null or \"\" only");
  BpeModel m;
  if (value.contains("ignore_merges"))
    m.ignore_merges_ = (place / "ignore_merges").as_bool(value["ignore_merges"]);
  if (value.contains("byte_fallback"))
    m.byte_fallback_ = (place / "byte_fallback").as_bool(value["byte_fallback"]);
  if (value.contains("fuse_unk")) m.fuse_unk_ = (place / "fuse_unk").as_bool(value["fuse_unk"]);
  const JsonPlace vocab_place = place / "vocab";
  const json& vocab = place.at(value, "vocab");
  if (!vocab.is_object()) vocab_place.malformed("expected an object of token -> id");
  m.vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    // The place (a formatted path) only for an error: a vocabulary has 10^5 entries.
    const std::uint32_t id = is_id(it.value()) ? it.value().get<std::uint32_t>()
                                               : (vocab_place / it.key()).as_id(it.value());
    m.vocab_.emplace(it.key(), id);
  }
  std::unordered_map<std::uint32_t, const std::string*> by_id;
  for (const auto& [token, id] : m.vocab_) {
    auto [it, fresh] = by_id.emplace(id, &token);
    if (!fresh)
      vocab_place.malformed(fmt::format("id {} is given to both {} and {}", id,
                                        short_json(*it->second), short_json(token)));
  }

  if (value.contains("unk_token") && !value["unk_token"].is_null()) {
    const JsonPlace unk_place = place / "unk_token";
    const std::string& unk = unk_place.as_string(value["unk_token"]);
    auto it = m.vocab_.find(unk);
    // tokenizers fails only when a text needs it; refused here before any text is encoded.
    if (it == m.vocab_.end())
      unk_place.malformed(fmt::format("{} is not in the vocabulary", short_json(unk)));
    m.unk_id_ = it->second;
  }
  if (m.byte_fallback_) {
    for (unsigned b = 0; b < 256; ++b) {
      auto it = m.vocab_.find(fmt::format("<0x{:02X}>", b));
      if (it != m.vocab_.end()) m.byte_ids_[b] = it->second;
    }
  }

  const JsonPlace merges_place = place / "merges";
  const json& merges = place.at(value, "merges");
  if (!merges.is_array()) merges_place.malformed("expected an array");
  m.merges_.reserve(merges.size());
  std::uint32_t rank = 0;
  for (std::size_t i = 0; i < merges.size(); ++i) {
    auto at = [&] { return merges_place[i]; };  // for an error only
    std::string left, right;
    if (merges[i].is_string()) {  // the legacy "a b" form; "#version" lines are comments
      const std::string& s = merges[i].get_ref<const std::string&>();
      if (s.starts_with("#version")) continue;
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        at().malformed(fmt::format("expected \"left right\", got {}", short_json(merges[i])));
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (merges[i].is_array() && merges[i].size() == 2 && merges[i][0].is_string() &&
               merges[i][1].is_string()) {
      left = merges[i][0].get<std::string>();
      right = merges[i][1].get<std::string>();
    } else {
      at().malformed(fmt::format("expected [\"left\", \"right\"] or \"left right\", got {}",
                                 short_json(merges[i])));
    }
    auto id_of = [&](const std::string& token) {
      auto it = m.vocab_.find(token);
      if (it == m.vocab_.end())
        at().malformed(fmt::format("{} is not in the vocabulary", short_json(token)));
      return it->second;
    };
    const std::uint64_t key = (std::uint64_t(id_of(left)) << 32) | id_of(right);
    // A pair listed twice keeps its last rank, as tokenizers' map does.
    m.merges_.insert_or_assign(key, Merge{rank++, id_of(left + right)});
  }
  return m;
}

bool BpeModel::covers_every_character() const {
  if (unk_id_) return true;
  if (!byte_fallback_) return false;
  for (const auto& id : byte_ids_)
    if (!id) return false;
  return true;
}

void BpeModel::encode(std::string_view word, std::vector<std::uint32_t>& out) const {
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  {
    std::lock_guard lock(cache_->mutex);
    if (auto it = cache_->words.find(word); it != cache_->words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t start = out.size();
  merge(word, out);
  if (word.size() <= kCacheWordBytes) {
    std::lock_guard lock(cache_->mutex);
    if (cache_->words.size() < kCacheWords)
      cache_->words.emplace(std::string(word),
                            std::vector<std::uint32_t>(out.begin() + start, out.end()));
  }
}

void BpeModel::merge(std::string_view word, std::vector<std::uint32_t>& out) const {
  struct Symbol {
    std::uint32_t id;
    int prev, next;
    bool removed;
  };
  std::vector<Symbol> symbols;
  auto add = [&](std::uint32_t id) {
    const int k = int(symbols.size());
    symbols.push_back({id, k - 1, k + 1, false});
  };
  // tokenizers' merge_word: an unknown character waits as a pending <unk> (one for a run of
  // them with fuse_unk) that is added when the next vocabulary character comes, or at the end;
  // characters given as bytes meanwhile do not add it, so their bytes come first.
  bool unk_pending = false;
  for (std::size_t i = 0; i < word.size();) {
    std::size_t n = utf8_sequence_length(word, i);
    if (n == 0) n = 1;  // pre-tokens are valid UTF-8; this only guards the loop
    const std::string_view c = word.substr(i, n);
    i += n;
    if (auto it = vocab_.find(c); it != vocab_.end()) {
      if (unk_pending) add(*unk_id_);
      unk_pending = false;
      add(it->second);
      continue;
    }
    if (byte_fallback_ && std::all_of(c.begin(), c.end(), [&](char b) {
          return byte_ids_[static_cast<unsigned char>(b)].has_value();
        })) {
      for (char b : c) add(*byte_ids_[static_cast<unsigned char>(b)]);
      continue;
    }
    if (!unk_id_)
      throw InputError(fmt::format(
          "the character {} of the pre-token {} is not in the tokenizer's vocabulary (and it "
          "has no unk_token)",
          short_json(std::string(c)), short_json(std::string(word))));
    if (unk_pending && !fuse_unk_) add(*unk_id_);
    unk_pending = true;
  }
  if (unk_pending) add(*unk_id_);
  if (!symbols.empty()) symbols.back().next = -1;

  // A min-heap on (rank, position): the lowest rank first, the leftmost on ties.
  struct Candidate {
    std::uint32_t rank;
    int pos;
    std::uint32_t id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto find = [&](std::uint32_t a, std::uint32_t b) -> const Merge* {
    auto it = merges_.find((std::uint64_t(a) << 32) | b);
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (int i = 0; i + 1 < int(symbols.size()); ++i)
    if (const Merge* m = find(symbols[i].id, symbols[i + 1].id)) queue.push({m->rank, i, m->id});

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.removed || left.next < 0) continue;
    const int right_pos = left.next;
    Symbol& right = symbols[right_pos];
    // A stale entry: the pair here is no longer the one this candidate merges.
    const Merge* now = find(left.id, right.id);
    if (!now || now->id != top.id) continue;
    left.id = top.id;
    right.removed = true;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0)
      if (const Merge* m = find(symbols[left.prev].id, left.id))
        queue.push({m->rank, left.prev, m->id});
    if (left.next >= 0)
      if (const Merge* m = find(left.id, symbols[left.next].id))
        queue.push({m->rank, top.pos, m->id});
  }
  for (const Symbol& s : symbols)
    if (!s.removed) out.push_back(s.id);
}

}  // namespace fsdp::models
