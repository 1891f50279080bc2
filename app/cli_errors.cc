#include "app/cli_errors.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "traces/fp8.h"

namespace ssdtrain::app {
namespace {

std::optional<int64_t> ParseInt(const std::string& s) {
  int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || ptr != end || s.empty()) return std::nullopt;
  return v;
}

std::optional<double> ParseReal(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

// "1", "0.5", "1e+09": a bound as a person writes it.
std::string Bound(double v) { return fmt::format("{:g}", v); }

size_t EditDistance(const std::string& a, const std::string& b) {
  // d[i][j]: a's first i letters into b's first j; a swap of neighbours costs one.
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

std::string Join(const std::vector<std::string>& words, const std::string& last_sep) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) {
    if (i > 0) out += i + 1 == words.size() ? last_sep : ", ";
    out += words[i];
  }
  return out;
}

}  // namespace

CLI::Validator IntAtLeast(int64_t min) {
  return CLI::Validator(
      [min](std::string& input) -> std::string {
        const std::optional<int64_t> v = ParseInt(input);
        if (!v) return fmt::format("must be an integer >= {}, got {}", min, input);
        if (*v < min) return fmt::format("must be >= {}, got {}", min, input);
        return "";
      },
      fmt::format(">={}", min));
}

CLI::Validator Fp8Recipe() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        // "" is no flag value at all; "off" reads as no recipe.
        if (!input.empty() && traces::ParseFp8Recipe(input)) return "";
        return fmt::format("must be {}, or off, got {}", traces::kFp8RecipeNames, input);
      },
      "RECIPE");
}

CLI::Validator IntBetween(int64_t lo, int64_t hi) {
  const std::string range =
      hi == lo + 1 ? fmt::format("{} or {}", lo, hi) : fmt::format("from {} to {}", lo, hi);
  return CLI::Validator(
      [lo, hi, range](std::string& input) -> std::string {
        const std::optional<int64_t> v = ParseInt(input);
        if (!v || *v < lo || *v > hi) return fmt::format("must be {}, got {}", range, input);
        return "";
      },
      fmt::format("in [{}, {}]", lo, hi));
}

CLI::Validator RealAtLeast(double min) {
  return CLI::Validator(
      [min](std::string& input) -> std::string {
        const std::optional<double> v = ParseReal(input);
        if (!v) return fmt::format("must be a number >= {}, got {}", Bound(min), input);
        if (*v < min) return fmt::format("must be >= {}, got {}", Bound(min), input);
        return "";
      },
      ">=" + Bound(min));
}

CLI::Validator RealAbove(double min) {
  return CLI::Validator(
      [min](std::string& input) -> std::string {
        const std::optional<double> v = ParseReal(input);
        if (!v) return fmt::format("must be a number > {}, got {}", Bound(min), input);
        if (*v <= min) return fmt::format("must be > {}, got {}", Bound(min), input);
        return "";
      },
      ">" + Bound(min));
}

std::vector<std::string> NearestVerbs(const std::string& typed,
                                      const std::vector<std::string>& verbs) {
  // Close: at most a third of the letters off, and at least two may be.
  const size_t limit = std::max<size_t>(2, typed.size() / 3);
  size_t best = limit + 1;
  for (const std::string& v : verbs) best = std::min(best, EditDistance(typed, v));
  std::vector<std::string> out;
  for (const std::string& v : verbs) {
    const bool prefix = typed.size() >= 2 && v.rfind(typed, 0) == 0;
    if (prefix || (best <= limit && EditDistance(typed, v) == best)) out.push_back(v);
  }
  return out;
}

std::string UnknownVerbMessage(const std::string& typed, const std::vector<std::string>& verbs) {
  const std::string all = Join(verbs, " and ");
  if (typed.empty()) {
    return fmt::format("give a verb: {} (ssdtrain --help says what each does)", all);
  }
  const std::vector<std::string> near = NearestVerbs(typed, verbs);
  const std::string guess =
      near.empty() ? "" : fmt::format("; did you mean {}?", Join(near, " or "));
  return fmt::format("unknown verb \"{}\"{} (the verbs: {})", typed, guess, all);
}

int ReportParseError(const CLI::App& app, const CLI::ParseError& e, const std::string& verb) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
    return app.exit(e);
  }
  const std::string who = verb.empty() ? "ssdtrain" : "ssdtrain " + verb;
  std::cerr << who << ": error: " << e.what() << " (" << who << " --help lists the flags)\n";
  return 1;
}

}  // namespace ssdtrain::app
