// `relpos settings` prints docs/settings.md; the CLI's sources use only the
// public headers (include/relpos/) and their own (src/cli/).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "cli/cli_test_util.h"
#include "relpos/lab/config.h"

namespace relpos::cli {
namespace {

TEST(SettingsVerb, PrintsTheDocsTable) {
  const CliResult r = RunRelpos({"settings"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, ExperimentConfig::SettingsMarkdown());
}

// Every quoted include of the CLI (tests aside) and of the Python extension
// names a public header or one of the folder's own.
TEST(ThinClient, SourcesIncludeOnlyPublicHeaders) {
  namespace fs = std::filesystem;
  const std::regex include(R"re(^\s*#\s*include\s*"([^"]+)")re");
  int checked = 0;
  for (const char* dir : {"src/cli", "python/src"}) {
    for (const auto& e :
         fs::directory_iterator(fs::path(RELPOS_SOURCE_DIR) / dir)) {
      const std::string name = e.path().filename().string();
      const bool source = name.ends_with(".cc") || name.ends_with(".h");
      if (!source || name.ends_with("_test.cc") ||
          name.ends_with("_test_util.h")) {
        continue;
      }
      std::ifstream in(e.path());
      std::string line;
      while (std::getline(in, line)) {
        std::smatch m;
        if (!std::regex_search(line, m, include)) continue;
        const std::string header = m[1];
        const fs::path folder = fs::path(RELPOS_SOURCE_DIR) / dir;
        const bool ok =
            header.starts_with("relpos/") ||
            (std::string(dir) == "src/cli" && header.starts_with("cli/")) ||
            (header.find('/') == std::string::npos &&
             fs::exists(folder / header));
        EXPECT_TRUE(ok) << dir << "/" << name << " includes " << header;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 10);
}

}  // namespace
}  // namespace relpos::cli
