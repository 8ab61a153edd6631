// Timing marks on streams: when a stream reached a point of its queued work, for what the host's
// clock cannot see on an accelerator, such as how long a stream stalled waiting for another
// (FSDP's exposed communication: fsdp/comm_scheduler.h). A device type may register its own
// marks (CUDA: timing events, torch.cuda.Event(enable_timing=True)); elsewhere a mark is a work
// item that reads the host's clock when its stream runs it (CPU: inline, at once; fake_cuda: on
// the stream's worker).
#pragma once

#include <memory>

#include "core/stream.h"

namespace fsdp {

class TimingMark {
 public:
  virtual ~TimingMark() = default;
  virtual bool done() = 0;  // whether the stream has reached it (no wait)
  virtual void wait() = 0;  // the host waits until the stream has reached it
  // Seconds from `earlier` to this mark, both of one device; the host waits for either not done.
  virtual double seconds_since(TimingMark& earlier) = 0;
};

using TimingMarkFn = std::unique_ptr<TimingMark> (*)(const Stream&);
void register_timing_marks(DeviceType type, TimingMarkFn make);
// A mark after the work queued on `stream` so far.
std::unique_ptr<TimingMark> timing_mark(const Stream& stream);

}  // namespace fsdp
