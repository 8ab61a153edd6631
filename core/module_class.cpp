// Module classes: the registry of class names and their bases, Python's C3 method resolution
// order (isinstance), and ClassSet.
#include <algorithm>
#include <mutex>
#include <unordered_set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/fqn.h"
#include "core/module.h"

namespace fsdp::nn {

// --- classes
namespace {
std::mutex g_class_mutex;
std::map<std::vector<std::string>, std::unique_ptr<ModuleClass>>& class_registry() {
  static std::map<std::vector<std::string>, std::unique_ptr<ModuleClass>> r;
  return r;
}

// C3 linearisation of the bases' MROs (Python's method resolution order).
std::vector<std::string> c3_merge(const std::string& name,
                                  std::initializer_list<const ModuleClass*> bases) {
  std::vector<std::vector<std::string>> seqs;
  for (const auto* b : bases) seqs.push_back(b->mro());
  std::vector<std::string> direct;
  for (const auto* b : bases) direct.push_back(b->name());
  seqs.push_back(direct);
  std::vector<std::string> out{name};
  while (true) {
    seqs.erase(std::remove_if(seqs.begin(), seqs.end(), [](auto& s) { return s.empty(); }),
               seqs.end());
    if (seqs.empty()) return out;
    std::string pick;
    for (const auto& s : seqs) {
      const std::string& cand = s.front();
      bool in_tail = false;
      for (const auto& o : seqs)
        if (std::find(o.begin() + 1, o.end(), cand) != o.end()) in_tail = true;
      if (!in_tail) {
        pick = cand;
        break;
      }
    }
    FSDP_CHECK(!pick.empty(), TypeError,
               "Cannot create a consistent method resolution order (MRO) for class {}", name);
    out.push_back(pick);
    for (auto& s : seqs)
      if (!s.empty() && s.front() == pick) s.erase(s.begin());
  }
}
}  // namespace

const ModuleClass& ModuleClass::from_names(const std::string& name,
                                           const std::vector<std::string>& mro_tail) {
  std::vector<std::string> mro{name};
  for (const auto& b : mro_tail)
    if (b != name) mro.push_back(b);
  std::lock_guard<std::mutex> lock(g_class_mutex);
  auto& slot = class_registry()[mro];
  if (!slot) slot = std::make_unique<ModuleClass>(mro);
  return *slot;
}

const ModuleClass& ModuleClass::get(const std::string& name,
                                    std::initializer_list<const ModuleClass*> bases) {
  std::vector<std::string> mro =
      bases.size() == 0 ? std::vector<std::string>{name} : c3_merge(name, bases);
  std::lock_guard<std::mutex> lock(g_class_mutex);
  auto& slot = class_registry()[mro];
  if (!slot) slot = std::make_unique<ModuleClass>(mro);
  return *slot;
}

const ModuleClass& ModuleClass::module() {
  static const ModuleClass& m = get("Module", {});
  return m;
}

const ModuleClass& named_class(const std::string& name,
                               std::initializer_list<const ModuleClass*> bases) {
  return ModuleClass::get(name, bases);
}

bool ModuleClass::is_subclass_of(std::string_view cls) const {
  for (const auto& n : mro_)
    if (n == cls) return true;
  return false;
}

ClassSet ClassSet::united(const ClassSet& other) const {
  ClassSet out = *this;
  out.names_.insert(other.names_.begin(), other.names_.end());
  return out;
}

bool ClassSet::matches(const ModuleClass& cls) const {
  for (const auto& n : cls.mro())
    if (names_.count(n)) return true;
  return false;
}

std::string ClassSet::str() const {
  std::string s = "{";
  bool first = true;
  for (const auto& n : names_) {
    if (!first) s += ", ";
    s += n;
    first = false;
  }
  return s + "}";
}

}  // namespace fsdp::nn
