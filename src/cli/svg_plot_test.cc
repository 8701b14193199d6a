#include "cli/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "relpos/error.h"

namespace relpos::cli {
namespace {

int Count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1))
    ++n;
  return n;
}

TEST(SvgPlot, OneLinePerSeriesLegendAndTrainMarker) {
  std::vector<PlotSeries> series = {
      {"absolute <learned>", {{8, 1.0}, {16, 0.9}, {32, 0.4}}},
      {"relative & k=16", {{8, 1.0}, {16, 1.0}, {32, 0.98}}},
  };
  PlotOptions o;
  o.title = "demo";
  o.train_max_x = 16;
  const std::string svg = RenderSvg(series, o);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(Count(svg, "<polyline"), 2);
  EXPECT_EQ(Count(svg, "<circle"), 3 + 1);  // first series + its legend
  EXPECT_NE(svg.find("absolute &lt;learned&gt;"), std::string::npos);
  EXPECT_NE(svg.find("relative &amp; k=16"), std::string::npos);
  EXPECT_NE(svg.find("longest training length"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray"), std::string::npos);
  // Tags balance (a cheap well-formedness check: every <text> closes).
  EXPECT_EQ(Count(svg, "<text"), Count(svg, "</text>"));
}

TEST(SvgPlot, NonFinitePointsBreakTheLine) {
  std::vector<PlotSeries> series = {
      {"a", {{1, 0.5}, {2, NAN}, {3, 0.7}, {4, 0.8}}}};
  const std::string svg = RenderSvg(series, PlotOptions{});
  EXPECT_EQ(Count(svg, "<polyline"), 2);
  EXPECT_EQ(Count(svg, "<circle"), 3 + 1);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

// The ten position schemes of `relpos compare` get ten colours.
TEST(SvgPlot, TenSeriesTenColours) {
  std::vector<PlotSeries> series;
  for (int k = 0; k < 10; ++k) {
    // (std::to_string alone: GCC 12 warns, -Wrestrict, on "s" + string.)
    series.push_back({std::to_string(k), {{1, 0.1 * k}, {2, 0.05 * k}}});
  }
  const std::string svg = RenderSvg(series, PlotOptions{});
  std::set<std::string> colours;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1)) {
    const size_t s = svg.find("stroke=\"", at) + 8;
    colours.insert(svg.substr(s, svg.find('"', s) - s));
  }
  EXPECT_EQ(colours.size(), 10u) << svg;
}

TEST(SvgPlot, LongTitleWrapsInsideTheCanvas) {
  PlotOptions o;
  o.title = "local_difference: per-token accuracy on the output positions "
            "by length (mean over seeds)";
  const std::vector<std::string> lines = WrapText(o.title, 15, o.width - 20.0);
  ASSERT_EQ(lines.size(), 2u);
  for (const std::string& line : lines) {
    EXPECT_LE(TextWidthEstimate(line, 15), o.width - 20.0) << line;
  }
  const std::string svg = RenderSvg({{"a", {{1, 0.5}, {2, 0.6}}}}, o);
  EXPECT_NE(svg.find(">" + lines[0] + "</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">" + lines[1] + "</text>"), std::string::npos) << svg;
  // Centred on the canvas, not on the plot area.
  EXPECT_NE(svg.find("<text x=\"360.0\" y=\"24.0\" text-anchor=\"middle\""),
            std::string::npos)
      << svg;
}

TEST(TickLabel, AsManyDecimalsAsTheStep) {
  EXPECT_EQ(TickLabel(0.02, 0.01), "0.02");
  EXPECT_EQ(TickLabel(0.003, 0.001), "0.003");
  EXPECT_EQ(TickLabel(0.4, 0.2), "0.4");
  EXPECT_EQ(TickLabel(1.0, 0.2), "1.0");
  EXPECT_EQ(TickLabel(40, 10), "40");
  EXPECT_EQ(TickLabel(-1e-17, 0.01), "0");
  EXPECT_EQ(TickLabel(0.30000000000000004, 0.1), "0.3");
}

// Small movements (inspect --svg) once read "0 0.0 0.0 0.0" on the y axis.
TEST(SvgPlot, TickLabelsOfASmallRangeAreDistinct) {
  PlotOptions o;
  o.y_max = 0.0062;
  const std::string svg = RenderSvg({{"a", {{1, 0.001}, {2, 0.006}}}}, o);
  std::set<std::string> labels;
  int n = 0;
  for (size_t at = svg.find("text-anchor=\"end\">"); at != std::string::npos;
       at = svg.find("text-anchor=\"end\">", at + 1)) {
    const size_t s = at + 18;
    labels.insert(svg.substr(s, svg.find('<', s) - s));
    ++n;
  }
  EXPECT_GE(n, 3);
  EXPECT_EQ(labels.size(), static_cast<size_t>(n)) << svg;
}

TEST(StackSvg, PanelsOneAboveTheOther) {
  const std::string panel = RenderSvg({{"a", {{1, 0.5}}}}, PlotOptions{});
  const std::string svg = StackSvg({panel, panel}, 720, 440);
  EXPECT_NE(svg.find("height=\"880\""), std::string::npos);
  EXPECT_NE(svg.find("<svg x=\"0\" y=\"440\""), std::string::npos);
  EXPECT_EQ(Count(svg, "<?xml"), 1);
  EXPECT_EQ(Count(svg, "<svg"), 3);
}

TEST(SvgPlot, Rejects) {
  EXPECT_THROW(RenderSvg({}, PlotOptions{}), InvalidArgument);
  EXPECT_THROW(RenderSvg({{"a", {{NAN, 1.0}}}}, PlotOptions{}),
               InvalidArgument);
}

TEST(XmlEscape, AllFive) {
  EXPECT_EQ(XmlEscape("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&apos;");
}

}  // namespace
}  // namespace relpos::cli
