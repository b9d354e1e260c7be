// File: server/settings.h
//
// The one declaration of ipupodd's scalar settings: each row of Settings()
// names a setting once (config key, flag, kind, range, unit, help, the
// ServerConfig member it sets; the default is that member's initializer in
// server/config.h) and everything else is derived from it:
//   * the flags of ipupodd (server/flags.cc binds a flag per row),
//   * the reading of its config key (server/config.cc's ParseTopLevel),
//   * the range checks of ValidateConfig (CheckSettingRanges),
//   * the descriptions of `ipupodd --help` (SettingHelp),
//   * the reference table of docs/configuration.md and the default config
//     deploy/ipupodd.json (`ipupodd --print-settings markdown|json`;
//     tests/server/settings_test.cc fails when either has drifted).
//
// A bad value gives one wording whether it came from the file, a flag or
// code, naming where it came from, the setting's key and flag, what is
// expected (the range and unit) and what was given:
//   config key 'max_waiters' (flag --max-waiters): expected an integer from 1 to 1000000
//   (waiters), got an integer 0
//   flag --lease-seconds (config key 'session_lease_seconds'): expected an integer from 1 to
//   3600 (seconds), got 0
//
// The structured keys (tokens, open_mode_admins, reset_ms, random_faults,
// sharing, tls, custom_ops) are not rows: a flat row cannot express a list or
// an object. server/config.cc reads them by hand, and docs/configuration.md
// describes them in the table below the generated one.
//
// Errors: INVALID_ARGUMENT, always. Thread safety: the table is constant;
// every function is pure (the Read/Apply functions write only the config
// they are given).
#ifndef IPUPOD_SERVER_SETTINGS_H_
#define IPUPOD_SERVER_SETTINGS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/json_reader.h"
#include "server/config.h"

namespace ipupod::server {

enum class SettingKind {
  kInt,     // int member, within [min, max]
  kInt64,   // int64_t member, within [min, max]
  kBool,    // bool member: true or false
  kString,  // std::string member: a non-empty string of at most kStringLengthMax bytes that
            // passes `check` (when set)
  kCustom,  // any member: `parse` reads the text, `show` writes it (pod, log_format)
};

struct Setting {
  absl::string_view key;         // the config key, also the setting's name
  absl::string_view flag;        // "--lease-seconds"
  absl::string_view value_name;  // in --help: "N", "MB", "ADDR"
  SettingKind kind;
  int ServerConfig::*int_member = nullptr;
  int64_t ServerConfig::*int64_member = nullptr;
  bool ServerConfig::*bool_member = nullptr;
  std::string ServerConfig::*string_member = nullptr;
  absl::Status (*check)(absl::string_view) = nullptr;                 // kString
  absl::Status (*parse)(absl::string_view, ServerConfig&) = nullptr;  // kCustom
  std::string (*show)(const ServerConfig&) = nullptr;                 // kCustom
  absl::string_view expected = "";  // kString, kCustom: what a JSON value of another type misses
  bool json_integer = false;        // kCustom: a JSON integer is read as its decimal text
  int64_t min = 0;                  // kInt, kInt64
  int64_t max = 0;
  absl::string_view unit = "";           // "seconds", "MB"; "" for none
  absl::string_view default_shown = "";  // the default as shown, when the member's is a
                                         // placeholder ("" = computed)
  absl::string_view packaged = "";       // what the packaged config (deploy/ipupodd.json) gives,
                                         // when not the default ("" = the default)
  absl::string_view help = "";           // one line: --help, the table, the default config
  absl::string_view details = "";        // more for the table only
};

// Every row, in the order of the docs table.
absl::Span<const Setting> Settings();
// The row of `key`, or nullptr.
const Setting* FindSetting(absl::string_view key);

// Reads the JSON value of `setting` (at `at`) into `config`. INVALID_ARGUMENT
// in the wording above when its type, range or form is wrong.
absl::Status ReadSettingJson(const Setting& setting, const json::Json& value,
                             const json::JsonPath& at, ServerConfig& config);
// Applies the text of the setting's flag to `config`; same checks, same
// wording, naming the flag first.
absl::Status ApplySettingFlag(const Setting& setting, absl::string_view text, ServerConfig& config);
// The range of every kInt and kInt64 row holds in `config` (set from code as
// much as from a file); INVALID_ARGUMENT naming the first that does not.
absl::Status CheckSettingRanges(const ServerConfig& config);

// The value of `setting` in `config` as it is written on a command line
// ("10", "POD16", "true", "127.0.0.1:50051").
std::string SettingText(const Setting& setting, const ServerConfig& config);
// The default as shown: default_shown, or SettingText of ServerConfig{}.
std::string SettingDefault(const Setting& setting);
// "1 to 3600 seconds", "true or false", "" for a string without range.
std::string SettingRange(const Setting& setting);
// The flag's description in --help: help, range, default and config key.
std::string SettingHelp(const Setting& setting);

// The reference table of docs/configuration.md, header included, one line
// per row, each ending in '\n'.
std::string RenderSettingsTable();
// deploy/ipupodd.json: a commented JSON object with every row at its default.
std::string RenderDefaultConfig();

}  // namespace ipupod::server

#endif  // IPUPOD_SERVER_SETTINGS_H_
