#include "core/memory_timeline_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace fsdp {

namespace {

// Bottom to top in the stack; colours from the Tableau 10 palette.
struct Layer {
  MemoryCategory category;
  const char* colour;
};
constexpr Layer kLayers[] = {
    {MemoryCategory::Parameters, "#4e79a7"},     {MemoryCategory::Gradients, "#f28e2b"},
    {MemoryCategory::OptimizerState, "#59a14f"}, {MemoryCategory::Activations, "#e15759"},
    {MemoryCategory::CommBuffers, "#b07aa1"},    {MemoryCategory::Other, "#9c9c9c"},
};

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// A step of 1, 2 or 5 times a power of ten giving about `count` ticks up to `max`.
double nice_step(double max, int count) {
  if (max <= 0) return 1;
  double raw = max / count;
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

std::string format_tick(double v) {
  return std::fabs(v - std::round(v)) < 1e-9 ? fmt::format("{:.0f}", v) : fmt::format("{:g}", v);
}

// The bytes per category after each record, thinned to at most max_points states (in each
// stretch the state with the highest total is kept, so no peak is lost).
struct State {
  double ms;
  MemoryTimeline::PerCategory bytes;
  std::int64_t total;
};

std::vector<State> states_of(const std::vector<MemoryTimeline::Record>& records,
                             std::size_t max_points) {
  std::vector<State> all;
  all.reserve(records.size() + 1);
  State s{0, {}, 0};
  all.push_back(s);
  for (const auto& r : records) {
    s.ms = static_cast<double>(r.time_ns) / 1e6;
    s.bytes[static_cast<std::size_t>(r.category)] += r.delta;
    s.total += r.delta;
    all.push_back(s);
  }
  if (max_points < 2 || all.size() <= max_points) return all;
  std::vector<State> kept;
  std::size_t per = (all.size() + max_points - 1) / max_points;
  for (std::size_t i = 0; i < all.size(); i += per) {
    std::size_t end = std::min(all.size(), i + per), best = i;
    for (std::size_t j = i; j < end; ++j)
      if (all[j].total > all[best].total) best = j;
    kept.push_back(all[best]);
  }
  if (kept.back().ms != all.back().ms) kept.push_back(all.back());
  return kept;
}

}  // namespace

std::string memory_timeline_svg(const MemoryTimeline& timeline,
                                const MemoryTimelineSvgOptions& options) {
  const auto records = timeline.records();
  const auto events = timeline.events();
  const auto peaks = timeline.peak_bytes();
  const std::vector<State> states = states_of(records, options.max_points);

  const double left = 80, right = 290, top = 50, bottom = 60;
  const double w = options.width, h = options.height;
  const double plot_w = std::max(10.0, w - left - right), plot_h = std::max(10.0, h - top - bottom);

  double t_max = states.back().ms;
  for (const auto& e : events) t_max = std::max(t_max, static_cast<double>(e.time_ns) / 1e6);
  if (t_max <= 0) t_max = 1;
  double mb_max = static_cast<double>(timeline.peak_total_bytes()) / 1e6;
  if (mb_max <= 0) mb_max = 1;
  const double t_step = nice_step(t_max, 8), mb_step = nice_step(mb_max, 6);
  const double t_end = std::ceil(t_max / t_step) * t_step;
  const double mb_end = std::ceil(mb_max / mb_step) * mb_step;
  auto x = [&](double ms) { return left + ms / t_end * plot_w; };
  auto y = [&](double mb) { return top + plot_h - mb / mb_end * plot_h; };

  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"24\" font-size=\"16\">{3}</text>\n",
      w, h, left, xml_escape(options.title));

  // Stacked areas: each layer between the running sum below it and that sum plus its bytes,
  // drawn as steps (the bytes hold until the next record).
  std::vector<double> below(states.size(), 0.0);
  for (const Layer& layer : kLayers) {
    auto c = static_cast<std::size_t>(layer.category);
    if (peaks[c] <= 0) continue;
    std::vector<double> upper(states.size());
    for (std::size_t i = 0; i < states.size(); ++i)
      upper[i] = below[i] + static_cast<double>(states[i].bytes[c]) / 1e6;
    std::string points;
    auto add = [&](double ms, double mb) { points += fmt::format("{:.1f},{:.1f} ", x(ms), y(mb)); };
    for (std::size_t i = 0; i < states.size(); ++i) {
      add(states[i].ms, upper[i]);
      add(i + 1 < states.size() ? states[i + 1].ms : t_max, upper[i]);
    }
    for (std::size_t i = states.size(); i-- > 0;) {
      add(i + 1 < states.size() ? states[i + 1].ms : t_max, below[i]);
      add(states[i].ms, below[i]);
    }
    svg += fmt::format(
        "<polygon class=\"area\" data-category=\"{}\" fill=\"{}\" fill-opacity=\"0.85\" "
        "points=\"{}\"/>\n",
        memory_category_name(layer.category), layer.colour, points);
    below = std::move(upper);
  }

  // Axes, ticks and grid.
  svg += fmt::format(
      "<g stroke=\"black\"><line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>"
      "<line x1=\"{0}\" y1=\"{3}\" x2=\"{0}\" y2=\"{1}\"/></g>\n",
      left, top + plot_h, left + plot_w, top);
  for (double t = 0; t <= t_end + t_step / 2; t += t_step)
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"black\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        x(t), top + plot_h, top + plot_h + 5, top + plot_h + 18, format_tick(t));
  for (double mb = 0; mb <= mb_end + mb_step / 2; mb += mb_step)
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#dddddd\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        left, y(mb), left + plot_w, left - 6, y(mb) + 4, format_tick(mb));
  svg += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">time (ms)</text>\n"
      "<text x=\"18\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {})\">"
      "memory (MB)</text>\n",
      left + plot_w / 2, h - 15, top + plot_h / 2, top + plot_h / 2);

  // Events: a dashed line and its name, written upwards from the top of the plot down.
  for (const auto& e : events) {
    double ex = x(static_cast<double>(e.time_ns) / 1e6);
    svg += fmt::format(
        "<g class=\"event\"><line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" "
        "stroke=\"#333333\" stroke-dasharray=\"3,3\"/>"
        "<text x=\"{3:.1f}\" y=\"{4}\" font-size=\"9\" text-anchor=\"end\" "
        "transform=\"rotate(-90 {3:.1f} {4})\">"
        "{5}</text></g>\n",
        ex, top, top + plot_h, ex - 2, top + 4, xml_escape(e.name));
  }

  // Legend: every category, top of the stack first, with its own peak.
  double ly = top + 10;
  for (auto it = std::rbegin(kLayers); it != std::rend(kLayers); ++it) {
    auto c = static_cast<std::size_t>(it->category);
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"14\" fill=\"{}\"/>"
        "<text class=\"legend\" x=\"{}\" y=\"{}\">{} (peak {:.2f} MB)</text>\n",
        left + plot_w + 16, ly, it->colour, left + plot_w + 36, ly + 12,
        memory_category_name(it->category), static_cast<double>(peaks[c]) / 1e6);
    ly += 22;
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\">peak total {:.2f} MB</text>\n", left + plot_w + 16,
                     ly + 12, static_cast<double>(timeline.peak_total_bytes()) / 1e6);
  svg += "</svg>\n";
  return svg;
}

void write_memory_timeline_svg(const MemoryTimeline& timeline, const std::string& path,
                               const MemoryTimelineSvgOptions& options) {
  std::ofstream out(path, std::ios::binary);
  if (out) out << memory_timeline_svg(timeline, options);
  if (!out)
    throw RuntimeError(fmt::format("memory timeline: cannot write the SVG chart to '{}'", path));
}

}  // namespace fsdp
