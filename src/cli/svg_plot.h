// A hand-written SVG line plot: accuracy (y, 0..1) against sequence length
// (x), one polyline with markers per model, a dashed vertical marker at the
// longest training length, axes with ticks, and a legend. Plain SVG 1.1 text,
// no scripts or external references, so any browser or viewer shows it.
#ifndef RELPOS_SRC_CLI_SVG_PLOT_H_
#define RELPOS_SRC_CLI_SVG_PLOT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace relpos::cli {

struct PlotSeries {
  std::string name;                               // legend entry
  std::vector<std::pair<double, double>> points;  // (length, accuracy)
};

struct PlotOptions {
  std::string title;
  std::string x_label = "sequence length";
  std::string y_label = "per-token accuracy";
  double y_min = 0.0, y_max = 1.0;
  // Dashed vertical line with a label ("longest training length"); < 0: none.
  double train_max_x = -1.0;
  int width = 720, height = 440;
};

// Renders the plot. Non-finite points are skipped (a gap in the line).
// InvalidArgument if there is no series or no finite point at all.
std::string RenderSvg(const std::vector<PlotSeries>& series,
                      const PlotOptions& options);

// Escapes &, <, >, " and ' for SVG text and attributes.
std::string XmlEscape(const std::string& text);

}  // namespace relpos::cli

#endif  // RELPOS_SRC_CLI_SVG_PLOT_H_
