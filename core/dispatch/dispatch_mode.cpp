#include "core/dispatch/dispatch_mode.h"

#include "core/error.h"

namespace fsdp::dispatch {

namespace detail {
thread_local constinit bool t_any_mode_active = false;
}  // namespace detail

namespace {
thread_local std::vector<ModePtr> t_modes;

void sync_flag() {
  detail::t_any_mode_active = !t_modes.empty();
}
}  // namespace

ModeGuard::ModeGuard(ModePtr mode) : mode_(mode.get()) {
  FSDP_CHECK(mode_ != nullptr, ValueError, "ModeGuard: the mode to push is null");
  t_modes.push_back(std::move(mode));
  sync_flag();
}

ModeGuard::~ModeGuard() {
  // Guards are scoped, so the innermost mode is ours unless someone popped it for good.
  if (!t_modes.empty() && t_modes.back().get() == mode_) t_modes.pop_back();
  sync_flag();
}

PopModeGuard::PopModeGuard() {
  FSDP_CHECK(!t_modes.empty(), RuntimeError, "PopModeGuard: no dispatch mode is active");
  mode_ = std::move(t_modes.back());
  t_modes.pop_back();
  sync_flag();
}

PopModeGuard::~PopModeGuard() {
  t_modes.push_back(std::move(mode_));
  sync_flag();
}

NoModesGuard::NoModesGuard() {
  saved_.swap(t_modes);
  sync_flag();
}

NoModesGuard::~NoModesGuard() {
  saved_.swap(t_modes);
  sync_flag();
}

DispatchMode* current_mode() {
  return t_modes.empty() ? nullptr : t_modes.back().get();
}

const std::vector<ModePtr>& mode_stack() {
  return t_modes;
}

DispatchMode* find_mode(ModeKind kind) {
  for (auto it = t_modes.rbegin(); it != t_modes.rend(); ++it)
    if ((*it)->kind() == kind) return it->get();
  return nullptr;
}

}  // namespace fsdp::dispatch
