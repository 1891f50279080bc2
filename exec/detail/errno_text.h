// "No space left on device (errno 28)": errno in messages, by name and number.
#pragma once

#include <cstring>
#include <string>

namespace ssdtrain::exec::detail {

inline std::string ErrnoText(int err) {
  const char* desc = strerrordesc_np(err);
  return std::string(desc ? desc : "unknown error") + " (errno " + std::to_string(err) + ")";
}

}  // namespace ssdtrain::exec::detail
