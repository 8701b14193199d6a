// docs/settings.md must be exactly what the settings declarations generate,
// so the documentation cannot drift from the code.
#include "cli/settings_doc.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "cli/cli_test_util.h"

namespace relpos::cli {
namespace {

TEST(SettingsDoc, DocsFileMatchesTheDeclarations) {
  std::ifstream in(std::string(RELPOS_SOURCE_DIR) + "/docs/settings.md");
  ASSERT_TRUE(in) << "docs/settings.md is missing";
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), SettingsMarkdown())
      << "docs/settings.md is stale: regenerate it with "
         "`build/release/bin/relpos settings > docs/settings.md`";
}

TEST(SettingsDoc, VerbPrintsTheTable) {
  const CliResult r = RunRelpos({"settings"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, SettingsMarkdown());
  // One row per declared setting, flags and keys as spelled.
  EXPECT_NE(r.out.find("| `layers` | `--layers` | integer | `2` | [0, 1024] |"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| `corpus_bytes` | `--corpus-bytes` |"),
            std::string::npos);
  EXPECT_NE(r.out.find("|  | `--terms` |"), std::string::npos);
}

}  // namespace
}  // namespace relpos::cli
