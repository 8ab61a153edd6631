#include "core/gemm_recorder.h"

#include <atomic>

#include "core/error.h"

namespace fsdp {
namespace {
std::atomic<GemmRecorder*> g_active{nullptr};
}  // namespace

GemmRecorder::GemmRecorder() {
  GemmRecorder* expected = nullptr;
  FSDP_CHECK(g_active.compare_exchange_strong(expected, this), RuntimeError,
             "GemmRecorder: another recorder is already active in this process (one at a time)");
}

GemmRecorder::~GemmRecorder() {
  g_active.store(nullptr);
}

std::vector<GemmCall> GemmRecorder::calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return calls_;
}

void GemmRecorder::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.clear();
}

void record_gemm(const GemmCall& call) {
  GemmRecorder* r = g_active.load(std::memory_order_acquire);
  if (r == nullptr) return;
  std::lock_guard<std::mutex> lock(r->mu_);
  r->calls_.push_back(call);
}

}  // namespace fsdp
