// Rounding sizes up to an alignment (O_DIRECT's 4096 bytes, the page).
#pragma once

#include <cstdint>

namespace ssdtrain::exec::detail {

// `n` rounded up to a multiple of `to` (> 0).
constexpr int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

}  // namespace ssdtrain::exec::detail
