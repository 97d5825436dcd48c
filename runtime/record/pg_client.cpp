#include "runtime/record/pg_client.hpp"

#include <libpq-fe.h>

#include <algorithm>
#include <memory>

#include "runtime/base/text_escape.hpp"

namespace sbx {
namespace {

constexpr const char* kStage = "trace db";

struct ResultClear {
  void operator()(PGresult* r) const { PQclear(r); }
};
using PgResultPtr = std::unique_ptr<PGresult, ResultClear>;

struct OptionsFree {
  void operator()(PQconninfoOption* o) const { PQconninfoFree(o); }
};

// libpq's own last line, without its trailing newline.
std::string pq_message(const char* m) {
  std::string s = m ? m : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return printable(s);
}

}  // namespace

std::string check_trace_db_url(std::string_view url) {
  if (url.empty()) return "the trace database URL is empty";
  if (url.size() > 4096) return "the trace database URL is over 4096 bytes";
  std::string text(url);
  char* err = nullptr;
  std::unique_ptr<PQconninfoOption, OptionsFree> opts(PQconninfoParse(text.c_str(), &err));
  if (!opts) {
    std::string why = err ? pq_message(err) : "out of memory";
    PQfreemem(err);
    return "not a PostgreSQL connection URI (postgresql://[user@]host[:port]/dbname?...) or key=value string: " + why;
  }
  for (auto* o = opts.get(); o->keyword; ++o) {
    std::string_view k = o->keyword;
    // password, and sslpassword (a client key's): any secret named in the URL.
    if (k.find("password") != std::string_view::npos && o->val && *o->val)
      return "the URL holds a " + std::string(k) +
             ", which would be readable in argv, records and files: leave it out and set PGPASSWORD, or a password "
             "file (PGPASSFILE, ~/.pgpass, or passfile= in the URL)";
  }
  return "";
}

std::string describe_trace_db(std::string_view url) { return printable(url); }

std::string sql_ident(std::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

const std::string& PgRow::at(std::size_t i) const {
  static const std::string empty;
  return i < cols.size() && cols[i] ? *cols[i] : empty;
}

void PgConn::Close::operator()(pg_conn* c) const { PQfinish(c); }

PgConn::~PgConn() = default;

Result<PgConn> PgConn::open(const std::string& url) {
  if (auto why = check_trace_db_url(url); !why.empty()) return make_error("usage", "--trace-db: " + why);
  // Defaults first (the URL's own values replace them), then what sbx requires (replacing the URL's).
  // Keepalives and tcp_user_timeout: a peer gone mid-query is found by the client, not only by
  // the server's statement_timeout.
  const char* keys[] = {
      "connect_timeout",  "keepalives",       "keepalives_idle", "keepalives_interval", "keepalives_count",
      "tcp_user_timeout", "application_name", "dbname",          "gssencmode",          nullptr};
  const char* vals[] = {"10", "1", "15", "5", "4", "60000", "sbx", url.c_str(), "disable", nullptr};
  PgConn conn(PQconnectdbParams(keys, vals, /*expand_dbname=*/1));
  if (!conn.c_) return make_error(kStage, "cannot connect to the trace database: out of memory");
  if (PQstatus(conn.c_.get()) != CONNECTION_OK)
    return make_error(kStage, "cannot connect to the trace database " + describe_trace_db(url) + ": " +
                                  pq_message(PQerrorMessage(conn.c_.get())));
  // Notices ("relation already exists, skipping") are not for sbx's users.
  PQsetNoticeProcessor(
      conn.c_.get(), [](void*, const char*) {}, nullptr);
  SBX_TRY(conn.exec("SET statement_timeout = '60s'"));
  SBX_TRY(conn.exec("SET client_encoding = 'UTF8'"));
  return conn;
}

Error PgConn::fail(const std::string& what, PGresult* r) {
  const char* state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
  sqlstate_ = state ? state : "";
  std::string msg = r ? pq_message(PQresultErrorMessage(r)) : "";
  if (msg.empty()) msg = pq_message(PQerrorMessage(c_.get()));
  return make_error(kStage, what + ": " + msg);
}

namespace {
// Parameters as libpq takes them (text format; nullptr for NULL).
std::vector<const char*> param_ptrs(const std::vector<PgParam>& params) {
  std::vector<const char*> p;
  p.reserve(params.size());
  for (auto& v : params) p.push_back(v ? v->c_str() : nullptr);
  return p;
}
// The statement's start, for messages: up to its first '(' or at most 60 bytes.
std::string first_words(std::string_view sql) {
  std::size_t n = std::min<std::size_t>(sql.size(), 60);
  for (std::size_t i = 0; i < n; ++i)
    if (sql[i] == '(' || sql[i] == '\n') n = i;
  std::string out = "'";
  out.append(sql.data(), n);
  while (out.size() > 1 && out.back() == ' ') out.pop_back();
  return out += "'";
}
}  // namespace

Status PgConn::exec(const std::string& sql, const std::vector<PgParam>& params) {
  auto p = param_ptrs(params);
  // Without parameters: the simple protocol, which takes several statements (a migration's).
  PgResultPtr r(params.empty() ? PQexec(c_.get(), sql.c_str())
                               : PQexecParams(c_.get(), sql.c_str(), static_cast<int>(p.size()), nullptr, p.data(),
                                              nullptr, nullptr, 0));
  auto st = r ? PQresultStatus(r.get()) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) return fail(first_words(sql) + " failed", r.get());
  sqlstate_.clear();
  return {};
}

Status PgConn::query(const std::string& sql, const std::vector<PgParam>& params,
                     const std::function<bool(const PgRow&)>& fn, std::size_t max_col) {
  auto p = param_ptrs(params);
  if (!PQsendQueryParams(c_.get(), sql.c_str(), static_cast<int>(p.size()), nullptr, p.data(), nullptr, nullptr, 0))
    return fail("cannot send " + first_words(sql), nullptr);
  // One row at a time: a result of a million rows never sits in memory at once.
  PQsetSingleRowMode(c_.get());
  std::optional<Error> error;
  bool wanted = true;
  PgRow row;
  // Every result must be read to the end (libpq's rule) even after an error or a stop.
  while (PgResultPtr r{PQgetResult(c_.get())}) {
    auto st = PQresultStatus(r.get());
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) continue;
    if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
      // Never asked for: a server that answers so is not one sbx talks to (libpq would return this
      // result forever). The connection is dropped; every later call on it fails.
      c_.reset();
      return make_error(kStage,
                        "the database answered " + first_words(sql) + " with a COPY: not a server sbx talks to");
    }
    if (st != PGRES_SINGLE_TUPLE) {
      if (!error) error = fail(first_words(sql) + " failed", r.get());
      continue;
    }
    if (error || !wanted) continue;
    const int n = PQnfields(r.get());
    row.cols.assign(static_cast<std::size_t>(n), std::nullopt);
    for (int i = 0; i < n && !error; ++i) {
      if (PQgetisnull(r.get(), 0, i)) continue;
      auto len = static_cast<std::size_t>(PQgetlength(r.get(), 0, i));
      if (len > max_col)
        error = make_error(kStage, std::string("the database returned ") + std::to_string(len) + " bytes in column " +
                                       PQfname(r.get(), i) + ", over the " + std::to_string(max_col) + "-byte bound");
      else row.cols[static_cast<std::size_t>(i)] = std::string(PQgetvalue(r.get(), 0, i), len);
    }
    if (!error) wanted = fn(row);
  }
  if (error) return *error;
  sqlstate_.clear();
  return {};
}

Result<std::optional<PgRow>> PgConn::query_one(const std::string& sql, const std::vector<PgParam>& params,
                                               std::size_t max_col) {
  std::optional<PgRow> out;
  SBX_TRY(query(
      sql, params,
      [&](const PgRow& r) {
    out = r;
    return false;
      },
      max_col));
  return out;
}

}  // namespace sbx
