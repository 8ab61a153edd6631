// Module's repr: PyTorch's nested printing of the module tree.
#include <algorithm>
#include <mutex>
#include <unordered_set>

#include "core/autograd.h"
#include "core/error.h"
#include "core/fqn.h"
#include "core/module.h"

namespace fsdp::nn {

// --- printing
namespace {
void repr_into(const Module& m, std::string& out, int indent, int depth) {
  std::string extra = m.extra_repr();
  out += m.type_name() + "(";
  std::vector<std::pair<std::string, ModulePtr>> kids;
  for (const auto& [n, c] : m.child_slots())
    if (c) kids.emplace_back(n, c);
  if (kids.empty()) {
    out += extra + ")";
    return;
  }
  std::string pad(static_cast<std::size_t>(indent + 2), ' ');
  out += "\n";
  if (!extra.empty()) out += pad + extra + "\n";
  if (depth > 200) {
    out += pad + "...\n" + std::string(static_cast<std::size_t>(indent), ' ') + ")";
    return;
  }
  for (const auto& [n, c] : kids) {
    out += pad + "(" + n + "): ";
    repr_into(*c, out, indent + 2, depth + 1);
    out += "\n";
  }
  out += std::string(static_cast<std::size_t>(indent), ' ') + ")";
}
}  // namespace

std::string Module::repr() const {
  std::string out;
  repr_into(*this, out, 0, 0);
  return out;
}

}  // namespace fsdp::nn
