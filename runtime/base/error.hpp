#pragma once
// Errors that carry their cause to the top: where it failed (stage), the errno if the kernel said
// no, and a message built where the context is known. Result<T> is the C++20 stand-in for
// std::expected<T, Error>: functions return it instead of bool + a log line.
#include <cerrno>
#include <string>
#include <utility>
#include <variant>

#include "runtime/base/stage.hpp"

namespace sbx {

struct Error {
  Stage stage = "prepare";  // one of kStages (stage.hpp): "mounts", "profile", "usage", ...
  int err = 0;              // errno, 0 when the failure is not a syscall's
  std::string message;      // what and where, without the strerror text
  std::string hint;         // what the caller can do about it ("" for none), after the cause

  // "<message>: <strerror> (<hint>)" (without the parts that are empty)
  std::string describe() const;
  // "setup failed at <stage>: <message>: <strerror>"
  std::string describe_with_stage() const;
  // The line sbx prints for a run that did not start: describe() for the caller's own mistake
  // (stage "usage"), said like a bad flag; describe_with_stage() for the rest.
  std::string describe_setup() const;
};

// An Error from the current errno.
Error sys_error(Stage stage, std::string message);
inline Error make_error(Stage stage, std::string message, int err = 0) { return Error{stage, err, std::move(message)}; }

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error e) : v_(std::move(e)) {}
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  const Error& error() const { return std::get<1>(v_); }
  Error& error() { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error e) : err_(std::move(e)), failed_(true) {}
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return err_; }
  Error& error() { return err_; }

 private:
  Error err_;
  bool failed_ = false;
};

using Status = Result<void>;

}  // namespace sbx

// Propagate a failed Result<...> from the current function.
#define SBX_TRY(expr)                                \
  do {                                               \
    auto sbx_try_r_ = (expr);                        \
    if (!sbx_try_r_.ok()) return sbx_try_r_.error(); \
  } while (0)
