#include "runtime/base/error.hpp"

#include <cstring>

namespace sbx {

std::string Error::describe() const {
  std::string text = err == 0 ? message : message + ": " + std::strerror(err);
  return hint.empty() ? text : text + " (" + hint + ")";
}

std::string Error::describe_with_stage() const {
  return std::string("setup failed at ") + stage.name() + ": " + describe();
}

std::string Error::describe_setup() const { return stage == "usage" ? describe() : describe_with_stage(); }

Error sys_error(Stage stage, std::string message) { return Error{stage, errno, std::move(message)}; }

}  // namespace sbx
