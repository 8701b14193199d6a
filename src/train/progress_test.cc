#include "train/progress.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace relpos::train {
namespace {

TEST(Format, DurationAndRate) {
  EXPECT_EQ(FormatDuration(0.4), "0s");
  EXPECT_EQ(FormatDuration(59.4), "59s");
  EXPECT_EQ(FormatDuration(185), "3m05s");
  EXPECT_EQ(FormatDuration(3720), "1h02m");
  EXPECT_EQ(FormatDuration(-1), "?");
  EXPECT_EQ(FormatRate(999), "999");
  EXPECT_EQ(FormatRate(12345), "12.3k");
  EXPECT_EQ(FormatRate(1234567), "1.23M");
}

TEST(Progress, LineHasElapsedEtaLossAndRate) {
  std::ostringstream os;
  Progress p(os, "train", 100, ProgressMode::kQuiet);
  const std::string line = p.Line(25, 1.5, 5000, 10.0, true);
  EXPECT_NE(line.find("train ["), std::string::npos) << line;
  EXPECT_NE(line.find("25/100"), std::string::npos) << line;
  EXPECT_NE(line.find("elapsed 10s"), std::string::npos) << line;
  // 25 units in 10 s: 75 left take 30 s at the same rate.
  EXPECT_NE(line.find("eta 30s"), std::string::npos) << line;
  EXPECT_NE(line.find("loss 1.5000"), std::string::npos) << line;
  EXPECT_NE(line.find("500 tok/s"), std::string::npos) << line;
  const std::string bare = p.Line(25, -1.0, 0, 10.0, false);
  EXPECT_EQ(bare.find('['), std::string::npos) << bare;
  EXPECT_EQ(bare.find("loss"), std::string::npos) << bare;
  EXPECT_EQ(bare.find("tok/s"), std::string::npos) << bare;
}

TEST(Progress, ResumedRunsEtaCountsOnlyItsOwnUnits) {
  std::ostringstream os;
  Progress p(os, "train", 100, ProgressMode::kQuiet);
  p.SetStart(60);
  // 20 units since the resume in 10 s: the 20 left take 10 s.
  const std::string line = p.Line(80, 1.5, 5000, 10.0, false);
  EXPECT_NE(line.find("80/100"), std::string::npos) << line;
  EXPECT_NE(line.find("eta 10s"), std::string::npos) << line;
  EXPECT_NE(p.Line(60, 1.5, 0, 1.0, false).find("eta ?"), std::string::npos);
}

TEST(Progress, LinesModePrintsPlainLines) {
  std::ostringstream os;
  {
    // Interval 0: every update prints a line.
    Progress p(os, "eval", 3, ProgressMode::kLines, 0.0);
    for (int i = 1; i <= 3; ++i) p.Update(i, 0.5, 100 * i);
    p.Finish();
    p.Finish();  // idempotent
  }
  const std::string s = os.str();
  EXPECT_EQ(s.find('\r'), std::string::npos) << s;
  int lines = 0;
  for (char c : s) lines += c == '\n';
  EXPECT_EQ(lines, 4) << s;  // three updates + the final line
  EXPECT_NE(s.find("3/3 (100%)"), std::string::npos) << s;
}

TEST(Progress, LinesModeThrottles) {
  std::ostringstream os;
  Progress p(os, "x", 1000, ProgressMode::kLines, 3600.0);
  for (int i = 1; i <= 1000; ++i) p.Update(i);
  // Only the first update falls outside the (hour-long) interval.
  int lines = 0;
  for (char c : os.str()) lines += c == '\n';
  EXPECT_EQ(lines, 1) << os.str();
}

TEST(Progress, TerminalModeRedrawsOneLine) {
  std::ostringstream os;
  {
    Progress p(os, "train", 2, ProgressMode::kTerminal);
    p.Update(1, 2.0, 10);
    p.Update(2, 1.0, 20);
    p.Finish();
  }
  const std::string s = os.str();
  EXPECT_EQ(s.front(), '\r') << s;
  EXPECT_EQ(s.back(), '\n') << s;
  int newlines = 0;
  for (char c : s) newlines += c == '\n';
  EXPECT_EQ(newlines, 1) << s;
}

// A note (a training run's latest held-out evaluation) ends every line from
// then on; in lines mode it is printed at once, whatever the interval.
TEST(Progress, NoteIsPrintedAtOnceAndKept) {
  std::ostringstream os;
  Progress p(os, "train", 10, ProgressMode::kLines, 3600.0);
  p.Update(1, 2.0, 10);  // the first line
  p.Update(5, 1.5, 50);  // within the interval: nothing
  p.Note("held-out loss 1.2000 at step 5");
  p.Finish();
  const std::string s = os.str();
  int lines = 0;
  for (char c : s) lines += c == '\n';
  EXPECT_EQ(lines, 3) << s;
  EXPECT_NE(s.find("5/10 ( 50%)"), std::string::npos) << s;
  EXPECT_NE(s.find("loss 1.5000"), std::string::npos) << s;
  // On the note's line and the final one, not on the first.
  const std::string note = "; held-out loss 1.2000 at step 5\n";
  EXPECT_GT(s.find(note), s.find('\n')) << s;
  EXPECT_NE(s.rfind(note), s.find(note)) << s;
  EXPECT_EQ(p.Line(5, 1.5, 0, 1.0, false).substr(
                p.Line(5, 1.5, 0, 1.0, false).find(';')),
            "; held-out loss 1.2000 at step 5");
}

TEST(Progress, QuietPrintsNothing) {
  std::ostringstream os;
  {
    Progress p(os, "q", 5, ProgressMode::kQuiet);
    p.Update(5, 1.0, 1);
    p.Finish();
  }
  EXPECT_TRUE(os.str().empty());
}

TEST(Progress, AutoOnAStringStreamIsLines) {
  std::ostringstream os;
  Progress p(os, "a", 1);
  EXPECT_EQ(p.mode(), ProgressMode::kLines);
}

}  // namespace
}  // namespace relpos::train
