#pragma once
// A PostgreSQL connection for the trace database (trace_mirror.hpp), over libpq (linked
// statically: CMakeLists.txt, and pg_stubs.cpp for the GSSAPI and LDAP parts sbx leaves out).
//
// What sbx asks of every connection, whatever the URL says:
//   - no password in the URL or connection string: it would sit in argv, a profile or a shell's
//     history. libpq reads it from PGPASSWORD or a password file (PGPASSFILE, ~/.pgpass, or
//     passfile= in the URL), which is where sbx's docs send it;
//   - no GSSAPI encryption (gssencmode=disable: sbx is built without Kerberos);
//   - bounded time: connect_timeout 10 s unless the URL sets one, every statement 60 s on the
//     server (statement_timeout), and TCP keepalives and tcp_user_timeout, so that a peer that
//     died mid-query is an error within about a minute, not a hang;
//   - bounded memory: rows are read one at a time (libpq's single-row mode) and a column past
//     the caller's bound is an error. libpq holds a whole row before sbx sees it: sbx's queries
//     bound their large columns in the SQL itself (CASE WHEN octet_length(...) <= N).
// The connection is blocking: it is used by sbx's CLI commands and by the detached shipper
// (`sbx trace ship --background`), never by a supervisor or a server loop.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.hpp"

struct pg_conn;
struct pg_result;

namespace sbx {

// The URL as sbx accepts it: a libpq connection URI (postgresql://...) or key=value string,
// without a password. Returns the reason it is refused; "" when it is accepted.
std::string check_trace_db_url(std::string_view url);

// A URL for messages: as given (it holds no password, check_trace_db_url), printable.
std::string describe_trace_db(std::string_view url);

// SQL's quoted identifier: "name" with inner quotes doubled (schema names, tenant names).
std::string sql_ident(std::string_view name);

// A parameter: text, or SQL NULL.
using PgParam = std::optional<std::string>;

// One row as read in single-row mode: each column's text, or nullopt for NULL.
struct PgRow {
  std::vector<std::optional<std::string>> cols;
  const std::string& at(std::size_t i) const;  // "" for NULL, and for a column the row lacks
  bool null(std::size_t i) const { return i >= cols.size() || !cols[i].has_value(); }
};

class PgConn {
 public:
  // Connects (blocking, bounded by connect_timeout) and sets the statement timeout.
  static Result<PgConn> open(const std::string& url);
  PgConn(PgConn&&) noexcept = default;
  PgConn& operator=(PgConn&&) noexcept = default;
  ~PgConn();

  // A statement with no rows wanted (DDL, INSERT without RETURNING, BEGIN/COMMIT); without
  // parameters, several separated by ';' (sbx's own SQL only: never text from outside).
  Status exec(const std::string& sql, const std::vector<PgParam>& params = {});
  // Rows, each handed to `fn` as it arrives (false stops reading: the rest are discarded). A
  // column longer than `max_col` bytes is an error naming it.
  Status query(const std::string& sql, const std::vector<PgParam>& params, const std::function<bool(const PgRow&)>& fn,
               std::size_t max_col = 1u << 20);
  // The first row, or nullopt when none.
  Result<std::optional<PgRow>> query_one(const std::string& sql, const std::vector<PgParam>& params = {},
                                         std::size_t max_col = 1u << 20);
  // SQLSTATE of the last failed statement ("42501": insufficient privilege), "" when none.
  const std::string& last_sqlstate() const { return sqlstate_; }

 private:
  struct Close {
    void operator()(pg_conn* c) const;
  };
  explicit PgConn(pg_conn* c) : c_(c) {}
  Error fail(const std::string& what, pg_result* r);
  std::unique_ptr<pg_conn, Close> c_;
  std::string sqlstate_;
};

}  // namespace sbx
