// What the `ssdtrain` binary says when its command line is wrong: range checks
// for numeric flags that state the range and the value given ("--micro-batch:
// must be >= 1, got -1"), the one line a parser error becomes ("ssdtrain
// VERB: error: ..."), and the verbs nearest a mistyped one.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace ssdtrain::app {

// An integer flag of at least `min` ("must be >= 1, got 0"); a value that is
// not an integer is refused as such ("must be an integer >= 1, got 1.5").
// Applies to each value of a repeatable flag.
CLI::Validator IntAtLeast(int64_t min);
// An integer flag within [lo, hi] ("must be 0 or 1, got 2" where hi = lo + 1).
CLI::Validator IntBetween(int64_t lo, int64_t hi);
// An FP8 recipe flag (--fp8): one of traces/fp8.h's recipes or "off" ("must
// be delayed, current, blockwise or mxfp8, or off, got e4m3").
CLI::Validator Fp8Recipe();
// A real-valued flag of at least `min` (inclusive: "must be >= 0, got -1").
CLI::Validator RealAtLeast(double min);
// A real-valued flag above `min` (exclusive: "must be > 0, got 0").
CLI::Validator RealAbove(double min);

// The verbs of `verbs` nearest `typed` by edit distance (optimal string
// alignment: a swap of two neighbouring letters counts one), and those that
// start with it; empty when none is close (more than a third of its letters
// off, at least two).
std::vector<std::string> NearestVerbs(const std::string& typed,
                                      const std::vector<std::string>& verbs);
// The line for a command line whose verb is missing (`typed` empty) or is not
// one of `verbs`: names it, suggests the nearest, lists them all.
std::string UnknownVerbMessage(const std::string& typed, const std::vector<std::string>& verbs);

// A CLI11 parse error as the other errors are: "ssdtrain VERB: error: <what>"
// ("ssdtrain: error: ..." without a verb) on stderr, with a pointer to
// --help; returns the exit status, 1. Help and version requests print as
// CLI11 prints them and return 0.
int ReportParseError(const CLI::App& app, const CLI::ParseError& e, const std::string& verb);

}  // namespace ssdtrain::app
