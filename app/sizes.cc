#include "app/sizes.h"

#include <cctype>
#include <iostream>
#include <limits>

namespace ssdtrain::app {

Result<int64_t> ParseSize(const std::string& flag, const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  std::string unit = text.substr(pos);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int shift = -1;
  if (unit.empty() || unit == "b") shift = 0;
  if (unit == "k" || unit == "kib" || unit == "kb") shift = 10;
  if (unit == "m" || unit == "mib" || unit == "mb") shift = 20;
  if (unit == "g" || unit == "gib" || unit == "gb") shift = 30;
  constexpr size_t kMaxDigits = 12;  // a terabyte in bytes; more is a typo
  if (pos == 0 || pos > kMaxDigits || shift < 0) {
    return Status::InvalidArgument(flag + ": must be a size such as 4096, 64k, 4M or 1G, got " +
                                   text);
  }
  const int64_t count = std::stoll(text.substr(0, pos));
  if (count > (std::numeric_limits<int64_t>::max() >> shift)) {
    return Status::InvalidArgument(flag + ": " + text + " is more bytes than fit in 64 bits");
  }
  const int64_t bytes = count << shift;
  if (bytes < 1) return Status::InvalidArgument(flag + ": must be >= 1 byte, got " + text);
  return bytes;
}

CLI::Validator SizeBytes() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        Result<int64_t> bytes = ParseSize("", input);
        if (!bytes.ok()) {
          std::string why = bytes.status().message();
          return why.rfind(": ", 0) == 0 ? why.substr(2) : why;
        }
        input = std::to_string(*bytes);
        return "";
      },
      "SIZE");
}

std::string RenamedValue(const std::string& verb, const std::string& flag, const std::string& old,
                         const std::string& now) {
  std::cerr << "ssdtrain " << verb << ": note: " << flag << " " << old << " is now " << flag << " "
            << now << "; " << old << " still works\n";
  return now;
}

}  // namespace ssdtrain::app
