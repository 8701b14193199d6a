// docs/settings.md, generated from the settings declarations.
#ifndef RELPOS_SRC_CLI_SETTINGS_DOC_H_
#define RELPOS_SRC_CLI_SETTINGS_DOC_H_

#include <string>

namespace relpos::cli {

// The whole of docs/settings.md.
std::string SettingsMarkdown();

}  // namespace relpos::cli

#endif  // RELPOS_SRC_CLI_SETTINGS_DOC_H_
