// OffloadEngine::Impl, the bandwidth cap (--ssd-bandwidth): each direction is a
// link of the capped rate; a completion is held until the link has moved its
// bytes after the requests before it.
#include <algorithm>
#include <cmath>
#include <vector>

#include "exec/detail/engine_impl.h"

namespace ssdtrain::exec {
namespace {

using detail::NowNs;

}  // namespace

void OffloadEngine::Impl::ScheduleRelease(size_t s, IoOp op) {
  requests[s].release_ns = 0;
  const double rate = options.bandwidth_cap_bytes_per_s;
  if (rate <= 0) return;
  int64_t& link = link_free_ns[op == IoOp::kWrite ? 1 : 0];
  const int64_t start = std::max(NowNs(), link);
  link = start + static_cast<int64_t>(std::ceil(static_cast<double>(requests[s].len) / rate * 1e9));
  requests[s].release_ns = link;
}

void OffloadEngine::Impl::ReleaseHeld(std::vector<size_t>* free_slots, int64_t* wait_ns) {
  if (held.empty()) return;
  const int64_t now = NowNs();
  int64_t next = -1;
  size_t kept = 0;
  for (size_t s : held) {
    if (requests[s].release_ns <= now) {
      FinishRequest(s, Status::Ok(), free_slots);
    } else {
      held[kept++] = s;  // in place: this runs on every pass of the I/O loop
      const int64_t left = requests[s].release_ns - now;
      next = next < 0 ? left : std::min(next, left);
    }
  }
  held.resize(kept);
  if (next >= 0 && (*wait_ns < 0 || next < *wait_ns)) *wait_ns = next;
}

}  // namespace ssdtrain::exec
