// Secrets in experiment configs: which mapping keys look like one, and the
// config text and JSON as shown to users with their values replaced by
// "<redacted>".
//
// A config must never hold a credential (checkpoint_storage refuses one, see
// checkpoint_storage_config.h), but a user may still put one elsewhere (say
// under data:). What the master shows to every reader of an experiment
// (GetExperiment, REST, det-cli describe, the dashboard) goes through these
// functions; what it sends to the experiment's own trials does not.
//
// Pure and thread-safe.
#ifndef DET_COMMON_CONFIG_REDACT_H_
#define DET_COMMON_CONFIG_REDACT_H_

#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace det {

inline constexpr char kRedacted[] = "<redacted>";

// Whether mapping key `key` names a secret (ASCII case-insensitive):
// access_key, secret_key, session_token, aws_access_key_id,
// aws_secret_access_key, aws_session_token, password, passwd, token, api_key,
// private_key, credentials, or any key containing "secret" or "password".
bool IsSecretConfigKey(std::string_view key);

// `value` with the value of every secret key of every map, at any depth,
// replaced by "<redacted>" (maps and lists under such a key as a whole).
// Nesting deeper than 256 levels is replaced by "<redacted>" as well.
nlohmann::json RedactConfigJson(nlohmann::json value);

// YAML (or JSON) config text as shown to users. Unchanged when no secret key
// occurs; else the text with each secret key's value replaced on its line(s)
// when the result parses to exactly RedactConfigJson of the original, and
// otherwise (flow-style maps, odd layouts) the redacted config as indented
// JSON (valid YAML). Text that does not parse within common/yaml_limits.h's
// default limits comes back as a one-line YAML comment saying so.
std::string RedactConfigYaml(std::string_view yaml);

}  // namespace det

#endif  // DET_COMMON_CONFIG_REDACT_H_
