// docs/settings.md must be exactly what the settings declarations generate,
// so the documentation cannot drift from the code.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "relpos/lab/config.h"

namespace relpos {
namespace {

TEST(SettingsDoc, DocsFileMatchesTheDeclarations) {
  std::ifstream in(std::string(RELPOS_SOURCE_DIR) + "/docs/settings.md");
  ASSERT_TRUE(in) << "docs/settings.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), ExperimentConfig::SettingsMarkdown())
      << "docs/settings.md is stale: regenerate it with "
         "`build/release/bin/relpos settings > docs/settings.md`";
}

TEST(SettingsDoc, OneRowPerDeclaredSetting) {
  const std::string md = ExperimentConfig::SettingsMarkdown();
  for (const SettingInfo& s : ExperimentConfig::Settings()) {
    const std::string cell = s.key.empty() ? "|  | `" : "| `" + s.key + "` |";
    EXPECT_NE(md.find(cell), std::string::npos) << s.section << " " << s.key;
  }
  EXPECT_NE(md.find("| `layers` | `--layers` | integer | `2` | [0, 1024] |"),
            std::string::npos)
      << md;
}

}  // namespace
}  // namespace relpos
