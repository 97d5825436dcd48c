// sbx trace export RUN --format in-toto [-o FILE] [--tenant NAME]: a run's record as an in-toto Statement v1 with
// a SLSA Provenance v1 predicate (runtime/record/provenance.hpp says what goes where).
#include <cstdio>
#include <memory>
#include <string>

#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "runtime/base/fsutil.hpp"
#include "runtime/base/paths.hpp"
#include "runtime/record/provenance.hpp"
#include "runtime/base/text_escape.hpp"
#include "runtime/record/trace_store.hpp"

namespace sbx::cli {

TraceSubcommand add_trace_export_command(CLI::App* trace, std::function<Dirs()> store) {
  struct Options {
    std::string run_id;
    std::string format = "in-toto";
    std::string output;
  };
  auto o = std::make_shared<Options>();
  auto* exp =
      trace->add_subcommand("export", "Export a run's record as provenance (in-toto Statement v1, SLSA Provenance v1)");
  exp->add_option("run_id", o->run_id, "Run id, a unique prefix of one, or 'last'")->required();
  exp->add_option("--format", o->format,
                  "in-toto (the only format: a Statement v1 with a SLSA Provenance v1 predicate)")
      ->check(CLI::IsMember({"in-toto"}));
  exp->add_option("-o,--output", o->output, "Write the statement to FILE instead of stdout");
  return {exp, [o, store = std::move(store)]() -> int {
            std::string legacy_file;
            auto rec = load_trace(store(), o->run_id, &legacy_file);
            if (!rec) return usage_error(rec.error().describe());
            // Provenance vouches for a run: only for a record the ledger's chain covers.
            if (!legacy_file.empty())
              return usage_error("trace export: " + legacy_file +
                                 " is a record of the previous store format, outside the hash-chained ledger: no "
                                 "provenance is exported for it (fix: 'sbx trace import' appends it to the ledger; "
                                 "export it then)");
            auto doc = intoto_statement(*rec);
            if (!doc) return usage_error(doc.error().describe());
            for (auto& s : doc->skipped) spdlog::warn("trace export: left out {}", printable(s));
            // ASCII JSON: text of outside origin in the record stays escaped.
            std::string text = doc->statement.dump(2, ' ', true, nlohmann::json::error_handler_t::replace) + "\n";
            if (o->output.empty()) {
              std::fwrite(text.data(), 1, text.size(), stdout);
              return std::fflush(stdout) == 0 ? 0 : usage_error("trace export: cannot write to stdout");
            }
            if (auto st = write_file_durable(o->output, text, 0644); !st)
              return usage_error("trace export: -o " + o->output + ": " + st.error().describe());
            return 0;
          }};
}

}  // namespace sbx::cli
