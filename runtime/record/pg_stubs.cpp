// The parts of libpq that sbx's static link leaves out: GSSAPI (Kerberos) and LDAP service
// lookup. Debian's libpq.a is built with both, and their libraries have no static archives, so
// these stand in for them and always fail. sbx never asks for either: every connection sets
// gssencmode=disable (pg_client.cpp), and a server that demands GSSAPI authentication, or a
// pg_service.conf entry that points at LDAP, is then an error from libpq ("GSSAPI ... failed",
// "could not initialize LDAP structure"), not a missing symbol at link time.
//
// C linkage, as libpq calls them; the types do not matter to the linker, and every stub returns
// the library's failure value (GSS_S_FAILURE = 13 << 16, LDAP_OTHER = 0x50, NULL).
#include <cstddef>
#include <cstdint>

extern "C" {

namespace {
constexpr std::uint32_t kGssFailure = 13u << 16;
constexpr int kLdapOther = 0x50;
}  // namespace

// gss_OID (a pointer to a struct): libpq only passes it back to gss_import_name.
void* GSS_C_NT_HOSTBASED_SERVICE = nullptr;

std::uint32_t gss_acquire_cred(std::uint32_t* minor, ...) {
  if (minor) *minor = 0;
  return kGssFailure;
}
std::uint32_t gss_delete_sec_context(std::uint32_t* minor, ...) {
  if (minor) *minor = 0;
  return kGssFailure;
}
std::uint32_t gss_display_status(std::uint32_t* minor, ...) {
  if (minor) *minor = 0;
  return kGssFailure;
}
std::uint32_t gss_import_name(std::uint32_t* minor, ...) {
  if (minor) *minor = 0;
  return kGssFailure;
}
std::uint32_t gss_init_sec_context(std::uint32_t* minor, ...) {
  if (minor) *minor = 0;
  return kGssFailure;
}
std::uint32_t gss_release_buffer(std::uint32_t* minor, ...) {
  if (minor) *minor = 0;
  return 0;
}
std::uint32_t gss_release_cred(std::uint32_t* minor, ...) {
  if (minor) *minor = 0;
  return 0;
}
std::uint32_t gss_release_name(std::uint32_t* minor, ...) {
  if (minor) *minor = 0;
  return 0;
}
std::uint32_t gss_unwrap(std::uint32_t* minor, ...) {
  if (minor) *minor = 0;
  return kGssFailure;
}
std::uint32_t gss_wrap(std::uint32_t* minor, ...) {
  if (minor) *minor = 0;
  return kGssFailure;
}
std::uint32_t gss_wrap_size_limit(std::uint32_t* minor, ...) {
  if (minor) *minor = 0;
  return kGssFailure;
}

void* ldap_init(const char*, int) { return nullptr; }
int ldap_set_option(void*, int, const void*) { return kLdapOther; }
int ldap_simple_bind(void*, const char*, const char*) { return -1; }
int ldap_search_st(void*, ...) { return kLdapOther; }
int ldap_result(void*, ...) { return -1; }
int ldap_count_entries(void*, void*) { return -1; }
void* ldap_first_entry(void*, void*) { return nullptr; }
void* ldap_get_values_len(void*, void*, const char*) { return nullptr; }
void ldap_value_free_len(void*) {}
int ldap_msgfree(void*) { return 0; }
int ldap_unbind(void*) { return 0; }
const char* ldap_err2string(int) { return "LDAP is not built into sbx"; }

}  // extern "C"
