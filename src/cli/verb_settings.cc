// `relpos settings`: the table of every model and training setting (JSON
// key, flag, type, default, valid values), generated from the declarations
// in src/model/model_config.cc and src/train/train_config.cc. docs/settings.md
// is this output (`relpos settings > docs/settings.md`); a test keeps the two
// equal.
#include <memory>
#include <string>

#include "cli/cli_common.h"
#include "cli/settings_doc.h"

namespace relpos::cli {

void AddSettingsVerb(CLI::App& app, std::ostream& out) {
  CLI::App* sub = app.add_subcommand(
      "settings",
      "Print the table of model and training settings (docs/settings.md)");
  sub->callback([&out] { out << SettingsMarkdown(); });
}

}  // namespace relpos::cli
