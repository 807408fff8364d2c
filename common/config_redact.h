// Secrets in experiment configs: which mapping keys look like one, and the
// config text and JSON as shown to users with their values replaced by
// "<redacted>".
//
// A config must never hold a credential (checkpoint_storage refuses one, see
// checkpoint_storage_config.h), but a user may still put one elsewhere (say
// under data:). What the master shows to every reader of an experiment
// (GetExperiment, REST, det-cli describe, the dashboard) and a trial's
// hparams as shown to readers (GetTrial, GetExperimentTrials, REST trials,
// det-cli trial describe) go through these functions; what it sends to the
// experiment's own trials does not, nor does a checkpoint's metadata.json,
// which holds the config as written.
//
// Pure and thread-safe.
#ifndef DET_COMMON_CONFIG_REDACT_H_
#define DET_COMMON_CONFIG_REDACT_H_

#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace det {

inline constexpr char kRedacted[] = "<redacted>";

// Whether mapping key `key` names a secret (ASCII case-insensitive, '-'
// read as '_'): access_key, secret_key, session_token, aws_access_key_id,
// aws_secret_access_key, aws_session_token, password, passwd, token,
// access_token, api_key, apikey, private_key, credentials; any key containing
// "secret" or "password"; any key ending in _token (but not the tokenizer's
// pad_token, eos_token, bos_token, unk_token, cls_token, sep_token,
// mask_token), _api_key, _apikey, _passwd or _private_key. Not: tokenizer,
// max_tokens, num_tokens.
bool IsSecretConfigKey(std::string_view key);

// `value` with the value of every secret key of every map, at any depth,
// replaced by "<redacted>" (maps and lists under such a key as a whole), and
// every string "NAME=VALUE" whose NAME (after leading '-') is a secret key,
// e.g. the environment_variables entry "AWS_SECRET_ACCESS_KEY=...", shown as
// "NAME=<redacted>". Nesting deeper than 256 levels is replaced by
// "<redacted>" as well.
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
