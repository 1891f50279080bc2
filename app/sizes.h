// One size syntax for every size flag: plain bytes ("4096") or a count with a
// binary multiple ("64k", "4M", "1G", "1GiB"; k, M, G and their KiB/KB forms
// all mean 2^10, 2^20, 2^30, as fio reads them).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "traces/status.h"

namespace ssdtrain::app {

// `text` as a byte count of at least 1; an error names `flag` and the syntax.
Result<int64_t> ParseSize(const std::string& flag, const std::string& text);

// A CLI11 transform (not check: it rewrites) for an integer flag that takes a size: rewrites "64M"
// to its bytes before the flag's integer conversion, and refuses what is not a size
// ("must be a size such as 4096, 64k, 4M or 1G, got 64X").
CLI::Validator SizeBytes();

// An old flag kept as an alias of `flag`: using it prints one line on stderr,
// "ssdtrain VERB: note: OLD is now FLAG; OLD still works", and stores its
// value where `flag` does.
template <typename T>
CLI::Option* AddAlias(CLI::App* cmd, const std::string& old_flag, const std::string& flag,
                      T& target) {
  const std::string verb = cmd->get_name();
  return cmd->add_option(old_flag, target, "Old name of " + flag + " (still accepted, with a note)")
      ->each([verb, old_flag, flag](const std::string&) {
        std::cerr << "ssdtrain " << verb << ": note: " << old_flag << " is now " << flag << "; "
                  << old_flag << " still works\n";
      });
}

// An old spelling of a value ("offload-all" for "offload-ssd"): prints the
// one-line note on stderr and returns the current spelling.
std::string RenamedValue(const std::string& verb, const std::string& flag, const std::string& old,
                         const std::string& now);

}  // namespace ssdtrain::app
