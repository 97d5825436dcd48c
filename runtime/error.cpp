#include "runtime/error.hpp"

#include <cstring>

namespace sbx {

std::string Error::describe() const {
  if (err == 0) return message;
  return message + ": " + std::strerror(err);
}

std::string Error::describe_with_stage() const {
  return "setup failed at " + stage + ": " + describe();
}

Error sys_error(std::string stage, std::string message) {
  return Error{std::move(stage), errno, std::move(message)};
}

}  // namespace sbx
