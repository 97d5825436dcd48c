#include <doctest/doctest.h>

#include <stdlib.h>

#include <optional>
#include <string>

#include "runtime/base/paths.hpp"

namespace {

// Sets (or, with nullopt, unsets) an environment variable for one test and puts it back after.
struct EnvVar {
  std::string name;
  std::optional<std::string> saved;
  EnvVar(const char* n, std::optional<std::string> value) : name(n) {
    if (const char* v = std::getenv(n)) saved = v;
    if (value) ::setenv(n, value->c_str(), 1);
    else ::unsetenv(n);
  }
  ~EnvVar() {
    if (saved) ::setenv(name.c_str(), saved->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("the config dir: XDG_CONFIG_HOME first, then HOME, else none; /etc/sbx always searched last") {
  {
    EnvVar x("XDG_CONFIG_HOME", "/xdg"), h("HOME", "/home/u");
    CHECK(sbx::user_config_dir() == "/xdg/sbx");
    CHECK(sbx::config_search_dirs("profiles") == std::vector<std::string>{"/xdg/sbx/profiles", "/etc/sbx/profiles"});
  }
  {
    EnvVar x("XDG_CONFIG_HOME", ""), h("HOME", "/home/u");  // an empty value counts as unset
    CHECK(sbx::user_config_dir() == "/home/u/.config/sbx");
    CHECK(sbx::config_search_dirs("tenants") == std::vector<std::string>{"/home/u/.config/sbx/tenants", "/etc/sbx/tenants"});
  }
  {
    EnvVar x("XDG_CONFIG_HOME", std::nullopt), h("HOME", std::nullopt);
    CHECK(sbx::user_config_dir().empty());
    CHECK(sbx::config_search_dirs("profiles") == std::vector<std::string>{"/etc/sbx/profiles"});
  }
}

TEST_CASE("current_dir is the process's working directory") {
  CHECK(!sbx::current_dir().empty());
  CHECK(sbx::current_dir().front() == '/');
}
