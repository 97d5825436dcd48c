// sbx profile ls | show NAME
#include <cstdio>

#include "cli/commands.hpp"
#include "runtime/base/json_io.hpp"
#include "runtime/model/profile.hpp"
#include "runtime/base/text_escape.hpp"

namespace sbx::cli {

void add_profile_command(CLI::App& app, GlobalOptions&, std::vector<Command>& out) {
  auto* profile = app.add_subcommand("profile", "List and show profiles (JSON files of run defaults)");
  profile->require_subcommand(1);
  auto* ls = profile->add_subcommand("ls", "List the profiles sbx can find, with where each comes from");
  static bool ls_json = false;
  ls->add_flag("--json", ls_json, "Print a JSON array (one object per profile) for scripts");
  auto* show = profile->add_subcommand("show", "Print a profile, and the run spec it produces");
  static std::string name;
  show->add_option("name", name, "Profile name or file")->required();

  out.push_back({profile, [ls, show]() -> int {
                   if (ls->parsed()) {
                     nlohmann::json arr = nlohmann::json::array();
                     for (auto& p : list_profiles()) {
                       auto loaded = load_profile(p.origin == "built-in" ? p.name : p.origin);
                       if (ls_json) {
                         nlohmann::json o = {{"name", p.name}, {"origin", p.origin}, {"valid", loaded.ok()}};
                         if (loaded) o["description"] = loaded->description;
                         else o["error"] = loaded.error().message;
                         arr.push_back(std::move(o));
                         continue;
                       }
                       std::string desc = loaded ? loaded->description : "(invalid: " + loaded.error().describe() + ")";
                       std::printf("%-12s %-40s %s\n", printable(p.name).c_str(), printable(p.origin).c_str(),
                                   printable(desc).c_str());
                     }
                     if (ls_json) std::printf("%s\n", dump_json(arr, 2, {}, true).c_str());  // ASCII (json_io.hpp)
                     return 0;
                   }
                   if (show->parsed()) {
                     auto loaded = load_profile(name);
                     if (!loaded) return usage_error(loaded.error().describe());
                     auto spec = spec_from_layers(*loaded, nullptr, "");
                     if (!spec) return usage_error(spec.error().message);
                     nlohmann::json j = {{"name", loaded->source.name},
                                         {"origin", loaded->source.origin},
                                         {"profile", loaded->as_written},
                                         {"spec", spec_to_json(*spec)}};
                     // Where the spec's limits come from besides the profile's own text.
                     if (!loaded->extends.empty()) j["extends"] = loaded->extends;
                     j["limits_from_default_profile"] = loaded->limits_defaulted;
                     std::printf("%s\n", dump_json(j, 2, {}, true).c_str());  // for a terminal: ASCII (json_io.hpp)
                     return 0;
                   }
                   return usage_error("profile: expected 'ls' or 'show NAME'");
                 }});
}

}  // namespace sbx::cli
