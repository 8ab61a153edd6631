// Draws a memory timeline (core/memory_timeline.h) as an SVG chart: bytes stacked by category
// over time (ms on x, MB on y), named events as vertical marks, a legend with each category's
// peak. Plain string output, no dependency.
#pragma once

#include <cstddef>
#include <string>

#include "core/memory_timeline.h"

namespace fsdp {

struct MemoryTimelineSvgOptions {
  std::string title = "memory timeline";
  int width = 1000, height = 500;
  std::size_t max_points = 2000;  // longer timelines keep each stretch's highest point
};

std::string memory_timeline_svg(const MemoryTimeline& timeline,
                                const MemoryTimelineSvgOptions& options = {});
// Writes memory_timeline_svg() to `path` (an fsdp::RuntimeError names the path on failure).
void write_memory_timeline_svg(const MemoryTimeline& timeline, const std::string& path,
                               const MemoryTimelineSvgOptions& options = {});

}  // namespace fsdp
