#pragma once
// The shipped profiles, compiled in from profiles/*.json (see cmake/embed_profiles.cmake).
#include <string_view>
#include <vector>

namespace sbx {
struct EmbeddedProfile {
  std::string_view name;
  std::string_view json;
};
const std::vector<EmbeddedProfile>& embedded_profiles();
}  // namespace sbx
