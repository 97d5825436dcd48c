#pragma once
// Options of docker, podman and bwrap that users type out of habit, mapped to sbx's own forms:
// an unknown option gets a line that says what to write instead, not only "unknown option".
#include <string>
#include <string_view>

namespace sbx {

// "docker's -e is --env NAME=VALUE here" for an option sbx does not have but docker, podman or
// bwrap does (`--network=none` is looked up as `--network`); "" for any other word.
std::string foreign_option_hint(std::string_view option);

// A word that reads as docker's volume SRC:DST[:OPTS] (DST absolute): after `sbx run -v`, it is
// a bind the user meant, never a program's name.
bool looks_like_volume(std::string_view word);

}  // namespace sbx
