#include "cli/svg_plot.h"

#include <gtest/gtest.h>

#include <cmath>
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
  EXPECT_EQ(Count(svg, "<circle"), 3);  // markers of the first series
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
  EXPECT_EQ(Count(svg, "<circle"), 3);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
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
