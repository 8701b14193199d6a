// `relpos settings`: the table of every model and training setting (JSON
// key, flag, type, default, valid values), generated from the declarations
// in src/model/model_config.cc and src/train/train_config.cc. docs/settings.md
// is this output (`relpos settings > docs/settings.md`); settings_doc_test
// keeps the two equal.
#include "cli/cli_common.h"
#include "relpos/lab/config.h"

namespace relpos::cli {

void AddSettingsVerb(CLI::App& app, std::ostream& out) {
  CLI::App* sub = app.add_subcommand(
      "settings",
      "Print the table of model and training settings (docs/settings.md)");
  sub->callback([&out] { out << ExperimentConfig::SettingsMarkdown(); });
}

}  // namespace relpos::cli
