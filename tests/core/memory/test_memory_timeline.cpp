// The memory timeline: allocations and frees by category, events, the thread hand-off that
// comm's workers use, and the SVG chart.
#include <boost/test/unit_test.hpp>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "core/memory_timeline.h"
#include "core/memory_timeline_svg.h"

using namespace fsdp;

namespace {

std::int64_t bytes(const MemoryTimeline::PerCategory& per, MemoryCategory c) {
  return per[static_cast<std::size_t>(c)];
}

// A small XML well-formedness check: tags nest and close, attribute values are quoted, text
// holds no raw '<' and every '&' starts an entity. Returns "" or what is wrong.
std::string xml_problem(const std::string& s) {
  std::vector<std::string> open;
  std::size_t i = 0;
  if (s.rfind("<?xml", 0) == 0) i = s.find("?>") + 2;
  while (i < s.size()) {
    if (s[i] == '&') {
      std::size_t semi = s.find(';', i);
      std::string entity = s.substr(i, semi == std::string::npos ? 8 : semi - i + 1);
      if (entity != "&amp;" && entity != "&lt;" && entity != "&gt;" && entity != "&quot;" &&
          entity != "&apos;")
        return "bad entity " + entity;
      i = semi + 1;
      continue;
    }
    if (s[i] != '<') {
      if (s[i] == '>') return "stray '>' at " + std::to_string(i);
      ++i;
      continue;
    }
    std::size_t end = i + 1;
    char quote = 0;
    for (; end < s.size(); ++end) {
      if (quote) {
        if (s[end] == quote)
          quote = 0;
        else if (s[end] == '<')
          return "'<' inside an attribute at " + std::to_string(end);
      } else if (s[end] == '"' || s[end] == '\'') {
        quote = s[end];
      } else if (s[end] == '>') {
        break;
      }
    }
    if (end >= s.size()) return "unterminated tag at " + std::to_string(i);
    std::string tag = s.substr(i + 1, end - i - 1);
    bool closing = tag[0] == '/', self_closing = tag.back() == '/';
    std::string name = tag.substr(closing ? 1 : 0);
    name = name.substr(0, name.find_first_of(" \n/"));
    if (closing) {
      if (open.empty() || open.back() != name) return "unbalanced </" + name + ">";
      open.pop_back();
    } else if (!self_closing) {
      open.push_back(name);
    }
    i = end + 1;
  }
  return open.empty() ? "" : "unclosed <" + open.back() + ">";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(memory_timeline)

BOOST_AUTO_TEST_CASE(allocations_are_recorded_by_category_and_frees_charged_back) {
  auto timeline = std::make_shared<MemoryTimeline>();
  std::unique_ptr<Storage> param, grad, state;
  {
    MemoryTimelineScope recording(timeline);
    {
      MemoryCategoryScope c(MemoryCategory::Parameters);
      param = std::make_unique<Storage>(4000, kCPU);
      MemoryCategoryScope inner(MemoryCategory::Gradients);  // the innermost wins
      grad = std::make_unique<Storage>(1000, kCPU);
    }
    {
      MemoryCategoryScope c(MemoryCategory::OptimizerState);
      state = std::make_unique<Storage>(8000, kCPU);
      param->resize(0);     // charged to parameters, where it was allocated
      param->resize(2000);  // a new allocation: optimizer state now
    }
    Storage other(300, kCPU);  // outside any category scope
  }
  Storage unrecorded(5000, kCPU);
  auto now = timeline->current_bytes();
  BOOST_TEST(bytes(now, MemoryCategory::Parameters) == 0);
  BOOST_TEST(bytes(now, MemoryCategory::Gradients) == 1000);
  BOOST_TEST(bytes(now, MemoryCategory::OptimizerState) == 10000);
  BOOST_TEST(bytes(now, MemoryCategory::Other) == 0);
  auto peak = timeline->peak_bytes();
  BOOST_TEST(bytes(peak, MemoryCategory::Parameters) == 4000);
  BOOST_TEST(bytes(peak, MemoryCategory::Other) == 300);
  BOOST_TEST(timeline->peak_total_bytes() == 13000);  // 4000 + 1000 + 8000
  BOOST_TEST(bytes(timeline->bytes_at_peak_total(), MemoryCategory::OptimizerState) == 8000);
  auto records = timeline->records();
  BOOST_REQUIRE(records.size() == 7u);
  BOOST_TEST(records[3].delta == -4000);
  BOOST_TEST((records[3].category == MemoryCategory::Parameters));
  for (std::size_t i = 1; i < records.size(); ++i)
    BOOST_TEST(records[i].time_ns >= records[i - 1].time_ns);
  grad.reset();  // after recording stopped, still charged to its timeline
  BOOST_TEST(bytes(timeline->current_bytes(), MemoryCategory::Gradients) == 0);
}

// comm's worker threads run a collective under MemoryScopes captured when it was queued: the
// category and the timeline go with them.
BOOST_AUTO_TEST_CASE(category_and_timeline_follow_work_to_another_thread) {
  auto timeline = std::make_shared<MemoryTimeline>();
  MemoryScopes captured;
  {
    MemoryTimelineScope recording(timeline);
    MemoryCategoryScope c(MemoryCategory::CommBuffers);
    captured = MemoryScopes::current();
  }
  BOOST_TEST((MemoryScopes::current().category() == MemoryCategory::Other));
  BOOST_TEST(MemoryScopes::current().timeline() == nullptr);
  MemoryCategory seen = MemoryCategory::Other;
  std::thread worker([&] {
    MemoryCategoryScope own(MemoryCategory::Activations);
    {
      MemoryScopesGuard queued(captured);
      seen = MemoryScopes::current().category();
      Storage buffer(2048, kCPU);
      mark_memory_event("reduce-scatter");
    }
    Storage after(64, kCPU);  // the worker's own context again: not recorded
  });
  worker.join();
  BOOST_TEST((seen == MemoryCategory::CommBuffers));
  BOOST_TEST(bytes(timeline->peak_bytes(), MemoryCategory::CommBuffers) == 2048);
  BOOST_TEST(bytes(timeline->peak_bytes(), MemoryCategory::Activations) == 0);
  BOOST_TEST(timeline->records().size() == 2u);
  BOOST_REQUIRE(timeline->events().size() == 1u);
  BOOST_TEST(timeline->events()[0].name == "reduce-scatter");
}

BOOST_AUTO_TEST_CASE(events_mark_the_recording_threads_timeline_only) {
  mark_memory_event("nobody records");  // no timeline: nothing happens
  auto timeline = std::make_shared<MemoryTimeline>();
  MemoryTimelineScope recording(timeline);
  mark_memory_event("unit 0 forward");
  mark_memory_event("unit 1 forward");
  auto events = timeline->events();
  BOOST_REQUIRE(events.size() == 2u);
  BOOST_TEST(events[0].name == "unit 0 forward");
  BOOST_TEST(events[1].name == "unit 1 forward");
  BOOST_TEST(events[1].time_ns >= events[0].time_ns);
}

BOOST_AUTO_TEST_CASE(the_svg_chart_is_well_formed_with_every_category) {
  auto timeline = std::make_shared<MemoryTimeline>();
  {
    MemoryTimelineScope recording(timeline);
    std::vector<std::unique_ptr<Storage>> live;
    for (MemoryCategory c : kMemoryCategories) {
      MemoryCategoryScope scope(c);
      live.push_back(std::make_unique<Storage>(100000 * (1 + static_cast<int>(c)), kCPU));
      mark_memory_event(std::string("after <") + std::string(memory_category_name(c)) + "> & co");
    }
  }
  MemoryTimelineSvgOptions o;
  o.title = "step 2 \"rank 0\"";
  std::string svg = memory_timeline_svg(*timeline, o);
  BOOST_TEST(xml_problem(svg) == "");
  BOOST_TEST(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\"") != std::string::npos);
  BOOST_TEST(svg.find("step 2 &quot;rank 0&quot;") != std::string::npos);
  for (MemoryCategory c : kMemoryCategories) {
    std::string name(memory_category_name(c));
    BOOST_TEST(svg.find("data-category=\"" + name + "\"") != std::string::npos, name);
    BOOST_TEST(svg.find(">" + name + " (peak ") != std::string::npos, name);
  }
  BOOST_TEST(svg.find("after &lt;activations&gt; &amp; co") != std::string::npos);
  BOOST_TEST(svg.find("time (ms)") != std::string::npos);
  BOOST_TEST(svg.find("memory (MB)") != std::string::npos);
  BOOST_TEST(svg.find("peak total 2.10 MB") != std::string::npos);  // 0.1 MB x (1 + ... + 6)
}

BOOST_AUTO_TEST_CASE(a_long_timeline_is_thinned_without_losing_its_peak) {
  auto timeline = std::make_shared<MemoryTimeline>();
  {
    MemoryTimelineScope recording(timeline);
    for (int i = 0; i < 3000; ++i) Storage s(i == 1234 ? 5'000'000 : 1000, kCPU);
  }
  MemoryTimelineSvgOptions o;
  o.max_points = 100;
  std::string svg = memory_timeline_svg(*timeline, o);
  BOOST_TEST(xml_problem(svg) == "");
  BOOST_TEST(svg.find("other (peak 5.00 MB)") != std::string::npos);
  std::size_t areas = 0, pos = 0;
  while ((pos = svg.find("class=\"area\"", pos)) != std::string::npos) ++areas, ++pos;
  BOOST_TEST(areas == 1u);
  BOOST_TEST(svg.size() < 20000u);  // about 100 states, 4 points each
  // The peak state survived thinning: some polygon vertex is at the top of the 5 MB bar.
  BOOST_TEST(svg.find(",50.0 ") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(writing_to_a_bad_path_names_it) {
  MemoryTimeline timeline;
  const std::string path = "/nonexistent-dir/timeline.svg";
  BOOST_CHECK_EXCEPTION(write_memory_timeline_svg(timeline, path), RuntimeError,
                        [&](const RuntimeError& e) {
                          return std::string(e.what()) ==
                                 "memory timeline: cannot write the SVG chart to "
                                 "'/nonexistent-dir/timeline.svg'";
                        });
}

BOOST_AUTO_TEST_SUITE_END()
