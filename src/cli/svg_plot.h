// A hand-written SVG line plot: accuracy (y, 0..1) against sequence length
// (x), one polyline with markers per model, a dashed vertical marker at the
// longest training length, axes with ticks, and a legend. Plain SVG 1.1 text,
// no scripts or external references, so any browser or viewer shows it.
// Every element stays inside the canvas: the title wraps to its width, the
// legend column is as wide as its longest entry, and ten series get ten
// colours (and five marker shapes); tests/e2e/test_plots.py renders the
// verbs' SVGs and checks it.
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

// One SVG document holding `panels` (RenderSvg's output, all `width` x
// `panel_height`) one above the other.
std::string StackSvg(const std::vector<std::string>& panels, int width,
                     int panel_height);

// Exposed for tests:
// A generous estimate of the width of `text` in a sans-serif font of
// `font_size` px (no font metrics are at hand: 0.6 em per character).
double TextWidthEstimate(const std::string& text, double font_size);
// `text` broken at spaces into lines whose estimated width fits `max_width`
// (a single word wider than that stays whole).
std::vector<std::string> WrapText(const std::string& text, double font_size,
                                  double max_width);
// A tick value with as many decimals as the tick step needs ("0.02").
std::string TickLabel(double value, double step);

}  // namespace relpos::cli

#endif  // RELPOS_SRC_CLI_SVG_PLOT_H_
