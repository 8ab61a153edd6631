// The stream sanitizer (core/stream_sanitizer.h) as a dispatch mode, as torch.cuda._sanitizer
// is one: while pushed it enables the sanitizer and names the accesses of the kernels each op
// queues by the op ("mm", "add_"). A rank running as a thread pushes its own (modes are per
// thread); the reports of every thread are collected together.
#pragma once

#include <string>
#include <vector>

#include "core/dispatch/dispatch_mode.h"
#include "core/stream_sanitizer.h"
#include "core/tensor.h"

namespace fsdp::stream_sanitizer {

class StreamSanitizerMode : public dispatch::DispatchMode {
 public:
  std::string name() const override { return "StreamSanitizerMode"; }
  nn::Value handle(const dispatch::OpCall& call) override;

 private:
  Enable enable_;
};

// The bytes a tensor's elements span in its storage (an access of a queued kernel).
Access access_of(const Tensor& t, bool write);

}  // namespace fsdp::stream_sanitizer
