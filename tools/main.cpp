// spattn: the command line. Subcommands live in tools/cmd_*.cpp; this file owns the one
// place errors become messages and exit codes, so no subcommand ever dies by an uncaught
// exception or a signal.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "cli.hpp"
#include "runner.hpp"
#include "spattn/error.hpp"

namespace {

// Bad input (names, sizes, files, values) exits 2; anything unforeseen exits 1.
constexpr int kExitBadInput = 2;
constexpr int kExitUnexpected = 1;

int report(const std::string& message, int code) {
  std::fflush(stdout);  // keep whatever was printed before the message in order
  fmt::print(stderr, "spattn: error: {}\n", message);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"spattn: training-free sparse attention for long-context inference"};
  app.require_subcommand(1);
  app.set_version_flag("--version", SPATTN_VERSION);  // project()'s VERSION (CMakeLists.txt)
  spattn::cli::add_bench_command(app);
  spattn::cli::add_mask_command(app);
  spattn::cli::add_calibrate_command(app);
  spattn::cli::add_run_command(app);
  spattn::cli::add_perplexity_command(app);
  // llama.cpp spells the physical batch "-ub", the cache types "-ctk" / "-ctv", conversation
  // mode "-cnv" and the system prompt "-sys"; CLI11 takes one-letter short names only.
  const auto llama_spelling = [](const std::string& a) -> std::string {
    if (a == "-ub") return "--ubatch-size";
    if (a == "-ctk") return "--cache-type-k";
    if (a == "-ctv") return "--cache-type-v";
    if (a == "-np") return "--parallel";
    if (a == "-cnv") return "--chat";
    if (a == "-sys") return "--system-prompt";
    return a;
  };
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) args.emplace_back(llama_spelling(argv[i]));
  spattn::cli::add_make_model_command(app);
  spattn::cli::add_tokenize_command(app);
  spattn::cli::add_search_command(app);
  spattn::cli::add_select_diag_command(app);
  spattn::cli::add_serve_command(app);
  spattn::cli::add_h2o_report_command(app);
  spattn::cli::add_bench_products_command(app);
  spattn::cli::add_eval_command(app);
  try {
    app.parse(std::move(args));
    return 0;
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const spattn::Error& e) {
    return report(e.what(), kExitBadInput);
  } catch (const std::bad_alloc&) {
    return report("out of memory (try a smaller --seq or fewer --heads)", kExitBadInput);
  } catch (const std::exception& e) {
    return report(std::string("unexpected failure: ") + e.what(), kExitUnexpected);
  }
}
