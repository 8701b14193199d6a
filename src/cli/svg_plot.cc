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

double TextWidthEstimate(const std::string& text, double font_size) {
  // Helvetica / Arial average about 0.5 em per character of mixed text; 0.6
  // errs on the wide side so that an estimate never undercuts the real width.
  return 0.6 * font_size * static_cast<double>(text.size());
}

std::vector<std::string> WrapText(const std::string& text, double font_size,
                                  double max_width) {
  std::vector<std::string> lines;
  std::string line;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(' ', at);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(at, end - at);
    const std::string longer = line.empty() ? word : line + " " + word;
    if (!line.empty() && TextWidthEstimate(longer, font_size) > max_width) {
      lines.push_back(line);
      line = word;
    } else {
      line = longer;
    }
    at = end + 1;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

std::string TickLabel(double value, double step) {
  // As many decimals as the step needs (0.01 -> 2), so that neighbouring
  // ticks never print alike ("0.0 0.0" for steps of 0.01).
  int decimals = 0;
  while (decimals < 12) {
    const double scaled = step * std::pow(10.0, decimals);
    if (std::fabs(scaled - std::round(scaled)) < 1e-6 * scaled) break;
    ++decimals;
  }
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  std::string s = buf;
  if (s.find_first_not_of("-0.") == std::string::npos) s = "0";  // "-0.00"
  return s;
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

// Ten colours that stay apart on white, for the ten position schemes: the
// colour-blind-safe Okabe-Ito set without its pale yellow, plus Paul Tol's
// wine, olive and a mid grey. Markers cycle through five shapes as well, so
// the plot also reads in grey scale.
constexpr const char* kColors[] = {"#0072B2", "#D55E00", "#009E73",
                                   "#CC79A7", "#E69F00", "#56B4E9",
                                   "#000000", "#882255", "#999933",
                                   "#7F7F7F"};
constexpr size_t kColorCount = sizeof kColors / sizeof kColors[0];

// The plot's geometry: margins around the plot area and the data ranges.
struct Frame {
  double left, right, top, bottom, pw, ph;
  double x_min, x_max, y_min, y_max;
  std::vector<std::string> title_lines;
  double px(double x) const {
    return left + (x - x_min) / (x_max - x_min) * pw;
  }
  double py(double y) const {
    y = std::clamp(y, y_min, y_max);
    return top + (1.0 - (y - y_min) / (y_max - y_min)) * ph;
  }
};

constexpr double kTitleSize = 15, kFontSize = 12;

Frame Layout(const std::vector<PlotSeries>& series, const PlotOptions& o) {
  Frame f{};
  f.x_min = std::numeric_limits<double>::infinity();
  f.x_max = -f.x_min;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      f.x_min = std::min(f.x_min, x);
      f.x_max = std::max(f.x_max, x);
    }
  }
  RELPOS_CLI_CHECK(std::isfinite(f.x_min), "plot: no finite point");
  if (o.train_max_x >= 0) {
    f.x_min = std::min(f.x_min, o.train_max_x);
    f.x_max = std::max(f.x_max, o.train_max_x);
  }
  if (f.x_max <= f.x_min) f.x_max = f.x_min + 1.0;
  f.y_min = o.y_min;
  f.y_max = o.y_max > o.y_min ? o.y_max : o.y_min + 1;
  // Left for the y tick labels, right for the legend (as wide as its
  // longest entry), top for the title, wrapped to the canvas.
  double legend = 0;
  for (const auto& s : series) {
    legend = std::max(legend, TextWidthEstimate(s.name, kFontSize));
  }
  f.left = 64;
  f.right = std::max(180.0, 46.0 + legend + 10.0);
  f.title_lines = WrapText(o.title, kTitleSize, o.width - 20.0);
  f.top = f.title_lines.empty()
              ? 20
              : 26 + 18.0 * static_cast<double>(f.title_lines.size());
  f.bottom = 56;
  f.pw = o.width - f.left - f.right;
  f.ph = o.height - f.top - f.bottom;
  RELPOS_CLI_CHECK(f.pw > 50 && f.ph > 50,
                   "plot: " << o.width << "x" << o.height
                            << " leaves no room for the plot area");
  return f;
}

std::string Line(double x1, double y1, double x2, double y2,
                 const std::string& style) {
  return "<line x1=\"" + Num(x1) + "\" y1=\"" + Num(y1) + "\" x2=\"" +
         Num(x2) + "\" y2=\"" + Num(y2) + "\" " + style + "/>\n";
}

std::string Text(double x, double y, const std::string& anchor,
                 const std::string& text, const std::string& extra = "") {
  return "<text x=\"" + Num(x) + "\" y=\"" + Num(y) + "\" text-anchor=\"" +
         anchor + "\"" + extra + ">" + XmlEscape(text) + "</text>\n";
}

// Title, grid, ticks, axes, axis labels and the training-length marker.
std::string Axes(const Frame& f, const PlotOptions& o) {
  std::string svg;
  for (size_t i = 0; i < f.title_lines.size(); ++i) {
    svg += Text(o.width / 2.0, 24 + 18.0 * static_cast<double>(i), "middle",
                f.title_lines[i], " font-size=\"15\"");
  }
  const double ystep = NiceStep(f.y_max - f.y_min, 5);
  for (double y = std::ceil(f.y_min / ystep - 1e-9) * ystep;
       y <= f.y_max + 1e-9 * ystep; y += ystep) {
    svg += Line(f.left, f.py(y), f.left + f.pw, f.py(y), "stroke=\"#e0e0e0\"");
    svg += Text(f.left - 6, f.py(y) + 4, "end", TickLabel(y, ystep));
  }
  const double xstep = NiceStep(f.x_max - f.x_min, 8);
  for (double x = std::ceil(f.x_min / xstep - 1e-9) * xstep;
       x <= f.x_max + 1e-9 * xstep; x += xstep) {
    svg += Line(f.px(x), f.top + f.ph, f.px(x), f.top + f.ph + 5,
                "stroke=\"black\"");
    svg += Text(f.px(x), f.top + f.ph + 18, "middle", TickLabel(x, xstep));
  }
  svg += Line(f.left, f.top, f.left, f.top + f.ph, "stroke=\"black\"");
  svg += Line(f.left, f.top + f.ph, f.left + f.pw, f.top + f.ph,
              "stroke=\"black\"");
  svg += Text(f.left + f.pw / 2, o.height - 14.0, "middle", o.x_label);
  svg += "<text transform=\"translate(16," + Num(f.top + f.ph / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + XmlEscape(o.y_label) +
         "</text>\n";
  if (o.train_max_x >= 0) {
    const double x = f.px(o.train_max_x);
    svg += Line(x, f.top, x, f.top + f.ph,
                "stroke=\"#666\" stroke-dasharray=\"5,4\"");
    svg += Text(x + 4, f.top + 12, "start", "longest training length",
                " fill=\"#666\"");
  }
  return svg;
}

// Marker `shape` (0-4: circle, square, triangle, diamond, inverted
// triangle) of radius 3.5 at (x, y).
std::string Marker(int shape, double x, double y, const char* color) {
  const double r = 3.5;
  if (shape == 0) {
    return "<circle cx=\"" + Num(x) + "\" cy=\"" + Num(y) +
           "\" r=\"3.5\" fill=\"" + color + "\"/>\n";
  }
  if (shape == 1) {
    return "<rect x=\"" + Num(x - r) + "\" y=\"" + Num(y - r) +
           "\" width=\"7\" height=\"7\" fill=\"" + color + "\"/>\n";
  }
  const double s = r * 1.25;
  std::string pts;
  if (shape == 2) {
    pts = Num(x) + "," + Num(y - s) + " " + Num(x + s) + "," + Num(y + s) +
          " " + Num(x - s) + "," + Num(y + s);
  } else if (shape == 3) {
    pts = Num(x) + "," + Num(y - s) + " " + Num(x + s) + "," + Num(y) + " " +
          Num(x) + "," + Num(y + s) + " " + Num(x - s) + "," + Num(y);
  } else {
    pts = Num(x) + "," + Num(y + s) + " " + Num(x + s) + "," + Num(y - s) +
          " " + Num(x - s) + "," + Num(y - s);
  }
  return "<polygon points=\"" + pts + "\" fill=\"" + color + "\"/>\n";
}

// Series `k`: polylines broken at non-finite points, markers, and its
// legend entry.
std::string Series(const Frame& f, const PlotSeries& series, size_t k) {
  const char* color = kColors[k % kColorCount];
  const int shape = static_cast<int>(k % 5);
  std::vector<std::pair<double, double>> pts = series.points;
  std::stable_sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) {
    return a.first < b.first;
  });
  std::string svg, run;
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
    run += Num(f.px(x)) + "," + Num(f.py(y));
  }
  flush();
  for (const auto& [x, y] : pts) {
    if (std::isfinite(x) && std::isfinite(y)) {
      svg += Marker(shape, f.px(x), f.py(y), color);
    }
  }
  const double ly = f.top + 10 + 20.0 * static_cast<double>(k);
  const double lx = f.left + f.pw + 16;
  svg += Line(lx, ly, lx + 24, ly,
              "stroke=\"" + std::string(color) + "\" stroke-width=\"2\"");
  svg += Marker(shape, lx + 12, ly, color);
  svg += Text(lx + 30, ly + 4, "start", series.name);
  return svg;
}

}  // namespace

std::string RenderSvg(const std::vector<PlotSeries>& series,
                      const PlotOptions& o) {
  RELPOS_CLI_CHECK(!series.empty(), "plot: no series");
  const Frame f = Layout(series, o);
  std::string svg;
  svg += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
         std::to_string(o.width) + "\" height=\"" + std::to_string(o.height) +
         "\" viewBox=\"0 0 " + std::to_string(o.width) + " " +
         std::to_string(o.height) +
         "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += Axes(f, o);
  for (size_t k = 0; k < series.size(); ++k) svg += Series(f, series[k], k);
  svg += "</svg>\n";
  return svg;
}

std::string StackSvg(const std::vector<std::string>& panels, int width,
                     int panel_height) {
  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  const int height = panel_height * static_cast<int>(panels.size());
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
         std::to_string(width) + "\" height=\"" + std::to_string(height) +
         "\" viewBox=\"0 0 " + std::to_string(width) + " " +
         std::to_string(height) + "\">\n";
  for (size_t i = 0; i < panels.size(); ++i) {
    std::string p = panels[i];
    const size_t decl = p.find("?>\n");
    if (p.rfind("<?xml", 0) == 0 && decl != std::string::npos) {
      p.erase(0, decl + 3);
    }
    // Place the panel: <svg ...> -> <svg x="0" y="..." ...>.
    RELPOS_CLI_CHECK(p.rfind("<svg", 0) == 0, "plot: a panel is not an <svg>");
    p.replace(0, 4, "<svg x=\"0\" y=\"" +
                        std::to_string(panel_height * static_cast<int>(i)) +
                        "\"");
    svg += p;
  }
  return svg + "</svg>\n";
}

}  // namespace relpos::cli
