// The OCI seccomp policy reader and the supervisor's BPF interpreter (runtime/linux/seccomp_policy.cpp).
// First byte even: the rest is a policy file's text, parsed; a policy that parses is compiled with
// libseccomp and its program run on a seccomp_data taken from the input's last bytes. First byte odd: the rest is a raw classic-BPF program plus a seccomp_data,
// run through seccomp_evaluate, which must stay in bounds whatever the program.
#include <linux/filter.h>
#include <linux/seccomp.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "runtime/linux/seccomp_policy.hpp"

namespace {

struct seccomp_data data_from(const std::uint8_t* p, std::size_t n) {
  struct seccomp_data d;
  std::memset(&d, 0, sizeof d);
  std::memcpy(&d, p, n < sizeof d ? n : sizeof d);
  return d;
}

void evaluate_raw(const std::uint8_t* p, std::size_t n) {
  struct seccomp_data d = data_from(p, n);
  std::size_t used = n < sizeof d ? n : sizeof d;
  std::vector<sock_filter> prog((n - used) / sizeof(sock_filter));
  if (!prog.empty()) std::memcpy(prog.data(), p + used, prog.size() * sizeof(sock_filter));
  std::uint32_t ret = sbx::seccomp_evaluate(prog, d);
  (void)sbx::seccomp_answer(ret);
  (void)sbx::seccomp_action_text(ret);
  (void)sbx::seccomp_syscall_name(d.arch, d.nr);
  (void)sbx::seccomp_arch_name(d.arch);
}

void parse_policy(const std::uint8_t* p, std::size_t n) {
  auto policy = sbx::parse_seccomp_policy(std::string_view(reinterpret_cast<const char*>(p), n), "fuzz.json");
  if (!policy) return;
  auto prog = sbx::compile_seccomp_policy(*policy);
  if (!prog) return;
  std::size_t tail = n < sizeof(struct seccomp_data) ? n : sizeof(struct seccomp_data);
  struct seccomp_data d = data_from(p + n - tail, tail);
  (void)sbx::seccomp_answer(sbx::seccomp_evaluate(*prog, d));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1) evaluate_raw(data + 1, size - 1);
  else parse_policy(data + 1, size - 1);
  return 0;
}
