#include "cli/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "cli/cli_common.h"

namespace relpos::cli {

std::string XmlEscape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
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

namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `target`
// ticks over `span`.
double NiceStep(double span, int target) {
  const double raw = span / std::max(target, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10.0 * mag;
}

std::string TickLabel(double v) {
  char buf[32];
  if (std::fabs(v - std::round(v)) < 1e-9) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f", v);
  }
  return buf;
}

// Colour-blind-safe palette (Okabe and Ito), with distinct markers so the
// plot also reads in grey scale.
constexpr const char* kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                   "#E69F00", "#56B4E9", "#000000", "#F0E442"};

}  // namespace

// Over 100 lines on purpose: it writes the SVG document top to bottom (axes,
// grid, training-range marker, series, legend) in the order it appears.
std::string RenderSvg(const std::vector<PlotSeries>& series,
                      const PlotOptions& o) {
  RELPOS_CLI_CHECK(!series.empty(), "plot: no series");
  double x_min = std::numeric_limits<double>::infinity();
  double x_max = -x_min;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x_min = std::min(x_min, x);
      x_max = std::max(x_max, x);
    }
  }
  RELPOS_CLI_CHECK(std::isfinite(x_min), "plot: no finite point");
  if (o.train_max_x >= 0) {
    x_min = std::min(x_min, o.train_max_x);
    x_max = std::max(x_max, o.train_max_x);
  }
  if (x_max <= x_min) x_max = x_min + 1.0;
  const double y_min = o.y_min,
               y_max = o.y_max > o.y_min ? o.y_max : o.y_min + 1;

  // Plot area inside margins (left for y labels, right for the legend).
  const double left = 64, right = 180, top = o.title.empty() ? 20 : 44,
               bottom = 56;
  const double pw = o.width - left - right, ph = o.height - top - bottom;
  auto px = [&](double x) { return left + (x - x_min) / (x_max - x_min) * pw; };
  auto py = [&](double y) {
    y = std::clamp(y, y_min, y_max);
    return top + (1.0 - (y - y_min) / (y_max - y_min)) * ph;
  };

  std::string svg;
  svg += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
         std::to_string(o.width) + "\" height=\"" + std::to_string(o.height) +
         "\" viewBox=\"0 0 " + std::to_string(o.width) + " " +
         std::to_string(o.height) +
         "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  if (!o.title.empty()) {
    svg += "<text x=\"" + Num(left + pw / 2) +
           "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" +
           XmlEscape(o.title) + "</text>\n";
  }

  // Grid and ticks.
  const double ystep = NiceStep(y_max - y_min, 5);
  for (double y = std::ceil(y_min / ystep) * ystep; y <= y_max + 1e-9;
       y += ystep) {
    svg += "<line x1=\"" + Num(left) + "\" y1=\"" + Num(py(y)) + "\" x2=\"" +
           Num(left + pw) + "\" y2=\"" + Num(py(y)) +
           "\" stroke=\"#e0e0e0\"/>\n";
    svg += "<text x=\"" + Num(left - 6) + "\" y=\"" + Num(py(y) + 4) +
           "\" text-anchor=\"end\">" + TickLabel(y) + "</text>\n";
  }
  const double xstep = NiceStep(x_max - x_min, 8);
  for (double x = std::ceil(x_min / xstep) * xstep; x <= x_max + 1e-9;
       x += xstep) {
    svg += "<line x1=\"" + Num(px(x)) + "\" y1=\"" + Num(top + ph) +
           "\" x2=\"" + Num(px(x)) + "\" y2=\"" + Num(top + ph + 5) +
           "\" stroke=\"black\"/>\n";
    svg += "<text x=\"" + Num(px(x)) + "\" y=\"" + Num(top + ph + 18) +
           "\" text-anchor=\"middle\">" + TickLabel(x) + "</text>\n";
  }
  // Axes.
  svg += "<line x1=\"" + Num(left) + "\" y1=\"" + Num(top) + "\" x2=\"" +
         Num(left) + "\" y2=\"" + Num(top + ph) + "\" stroke=\"black\"/>\n";
  svg += "<line x1=\"" + Num(left) + "\" y1=\"" + Num(top + ph) + "\" x2=\"" +
         Num(left + pw) + "\" y2=\"" + Num(top + ph) +
         "\" stroke=\"black\"/>\n";
  svg += "<text x=\"" + Num(left + pw / 2) + "\" y=\"" + Num(o.height - 14.0) +
         "\" text-anchor=\"middle\">" + XmlEscape(o.x_label) + "</text>\n";
  svg += "<text transform=\"translate(16," + Num(top + ph / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + XmlEscape(o.y_label) +
         "</text>\n";

  if (o.train_max_x >= 0) {
    const double x = px(o.train_max_x);
    svg += "<line x1=\"" + Num(x) + "\" y1=\"" + Num(top) + "\" x2=\"" +
           Num(x) + "\" y2=\"" + Num(top + ph) +
           "\" stroke=\"#666\" stroke-dasharray=\"5,4\"/>\n";
    svg += "<text x=\"" + Num(x + 4) + "\" y=\"" + Num(top + 12) +
           "\" fill=\"#666\">longest training length</text>\n";
  }

  // Series: polylines broken at non-finite points, with markers.
  for (size_t k = 0; k < series.size(); ++k) {
    const char* color = kColors[k % (sizeof kColors / sizeof kColors[0])];
    std::vector<std::pair<double, double>> pts = series[k].points;
    std::stable_sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) {
      return a.first < b.first;
    });
    std::string run;
    auto flush = [&] {
      if (!run.empty()) {
        svg += "<polyline fill=\"none\" stroke=\"" + std::string(color) +
               "\" stroke-width=\"2\" points=\"" + run + "\"/>\n";
      }
      run.clear();
    };
    for (const auto& [x, y] : pts) {
      if (!std::isfinite(x) || !std::isfinite(y)) {
        flush();
        continue;
      }
      if (!run.empty()) run += ' ';
      run += Num(px(x)) + "," + Num(py(y));
    }
    flush();
    for (const auto& [x, y] : pts) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      if (k % 2 == 0) {
        svg += "<circle cx=\"" + Num(px(x)) + "\" cy=\"" + Num(py(y)) +
               "\" r=\"3.5\" fill=\"" + color + "\"/>\n";
      } else {
        svg += "<rect x=\"" + Num(px(x) - 3.5) + "\" y=\"" + Num(py(y) - 3.5) +
               "\" width=\"7\" height=\"7\" fill=\"" + color + "\"/>\n";
      }
    }
    // Legend entry.
    const double ly = top + 10 + 20.0 * static_cast<double>(k);
    const double lx = left + pw + 16;
    svg += "<line x1=\"" + Num(lx) + "\" y1=\"" + Num(ly) + "\" x2=\"" +
           Num(lx + 24) + "\" y2=\"" + Num(ly) + "\" stroke=\"" + color +
           "\" stroke-width=\"2\"/>\n";
    svg += "<text x=\"" + Num(lx + 30) + "\" y=\"" + Num(ly + 4) + "\">" +
           XmlEscape(series[k].name) + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace relpos::cli
