#include "comm/mpi/launcher_loss.h"

#include <pmix.h>

#include <atomic>
#include <cstddef>

namespace fsdp::comm::mpi {

namespace {

std::atomic<void (*)()> g_on_loss{nullptr};
std::atomic<bool> g_initialized{false};  // our PMIx_Init (PMIx counts its users)
std::size_t g_handler_id = 0;

void on_event(std::size_t, pmix_status_t, const pmix_proc_t*, pmix_info_t*, std::size_t,
              pmix_info_t*, std::size_t, pmix_event_notification_cbfunc_fn_t done, void* cbdata) {
  if (auto on_loss = g_on_loss.load()) on_loss();
  // Open MPI's own handler comes next (and ends the rank).
  if (done) done(PMIX_SUCCESS, nullptr, 0, nullptr, nullptr, cbdata);
}

}  // namespace

bool watch_launcher_loss(void (*on_loss)()) {
  if (g_initialized.load()) return true;
  pmix_proc_t me;
  if (PMIx_Init(&me, nullptr, 0) != PMIX_SUCCESS) return false;
  g_on_loss = on_loss;
  pmix_status_t code = PMIX_ERR_LOST_CONNECTION;
  pmix_info_t first;
  bool yes = true;
  PMIX_INFO_LOAD(&first, PMIX_EVENT_HDLR_FIRST, &yes, PMIX_BOOL);
  // Without a callback the registration is blocking: the handler's reference, or a negative
  // status.
  const pmix_status_t id =
      PMIx_Register_event_handler(&code, 1, &first, 1, on_event, nullptr, nullptr);
  PMIX_INFO_DESTRUCT(&first);
  if (id < 0) {
    PMIx_Finalize(nullptr, 0);
    g_on_loss = nullptr;
    return false;
  }
  g_handler_id = static_cast<std::size_t>(id);
  g_initialized = true;
  return true;
}

void unwatch_launcher_loss() {
  if (!g_initialized.exchange(false)) return;
  g_on_loss = nullptr;
  PMIx_Deregister_event_handler(g_handler_id, nullptr, nullptr);
  PMIx_Finalize(nullptr, 0);
}

}  // namespace fsdp::comm::mpi
