// OffloadEngine::Impl, the bandwidth cap (--ssd-bandwidth): one link of the
// capped rate shared by reads and writes the way the simulator's SSD shares its
// rate (sim/fluid.cc): each direction's requests cross it in submission order,
// the two directions' heads split the rate evenly while both are on it. A
// completion is held until the link has moved the request's bytes.
#include <algorithm>
#include <cmath>
#include <vector>

#include "exec/detail/engine_impl.h"

namespace ssdtrain::exec {
namespace {

using detail::NowNs;

// Bytes left below this count as crossed: the link's progress is computed in
// doubles, piecewise, and must not strand a request on a rounding residue.
constexpr double kCrossedBytes = 0.5;

}  // namespace

void OffloadEngine::Impl::JoinLink(size_t s, IoOp op) {
  Request& r = requests[s];
  r.on_link = false;
  if (options.bandwidth_cap_bytes_per_s <= 0) return;
  AdvanceLink(NowNs());
  const int d = op == IoOp::kWrite ? 1 : 0;
  if (link.fifo[d].empty()) link.head_left[d] = static_cast<double>(r.len);
  link.fifo[d].push_back(s);
  r.on_link = true;
}

void OffloadEngine::Impl::AdvanceLink(int64_t now_ns) {
  double dt = static_cast<double>(now_ns - link.updated_ns);
  link.updated_ns = now_ns;
  const double ns_rate = options.bandwidth_cap_bytes_per_s / 1e9;  // bytes per ns, whole link
  while (dt > 0) {
    const int active = static_cast<int>(!link.fifo[0].empty()) + !link.fifo[1].empty();
    if (active == 0) return;
    const double each = ns_rate / active;
    // Until the first head crosses (or `now`), the rates stay as they are.
    double step = dt;
    for (int d = 0; d < 2; ++d) {
      if (!link.fifo[d].empty()) step = std::min(step, link.head_left[d] / each);
    }
    dt -= step;
    for (int d = 0; d < 2; ++d) {
      if (link.fifo[d].empty()) continue;
      link.head_left[d] -= step * each;
      if (link.head_left[d] >= kCrossedBytes) continue;
      const size_t s = link.fifo[d].front();
      link.fifo[d].pop_front();
      requests[s].on_link = false;
      if (!link.fifo[d].empty()) {
        link.head_left[d] = static_cast<double>(requests[link.fifo[d].front()].len);
      }
    }
  }
}

void OffloadEngine::Impl::LeaveLink(size_t s) {
  Request& r = requests[s];
  if (!r.on_link) return;
  AdvanceLink(NowNs());
  if (!r.on_link) return;  // its bytes crossed just now
  r.on_link = false;
  const int d = r.job->op == IoOp::kWrite ? 1 : 0;
  auto& q = link.fifo[d];
  const bool was_head = !q.empty() && q.front() == s;
  q.erase(std::find(q.begin(), q.end(), s));
  if (was_head && !q.empty()) link.head_left[d] = static_cast<double>(requests[q.front()].len);
}

int64_t OffloadEngine::Impl::NextLinkDoneNs() const {
  const int active = static_cast<int>(!link.fifo[0].empty()) + !link.fifo[1].empty();
  if (active == 0) return -1;
  const double each = options.bandwidth_cap_bytes_per_s / 1e9 / active;
  double next = -1;
  for (int d = 0; d < 2; ++d) {
    if (link.fifo[d].empty()) continue;
    const double t = link.head_left[d] / each;
    next = next < 0 ? t : std::min(next, t);
  }
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(next)));
}

void OffloadEngine::Impl::ReleaseHeld(std::vector<size_t>* free_slots, int64_t* wait_ns) {
  if (held.empty()) return;
  AdvanceLink(NowNs());
  size_t kept = 0;
  for (size_t s : held) {
    if (!requests[s].on_link) {  // held requests joined it: off it, their bytes crossed
      FinishRequest(s, Status::Ok(), free_slots);
    } else {
      held[kept++] = s;  // in place: this runs on every pass of the I/O loop
    }
  }
  held.resize(kept);
  if (kept == 0) return;
  // A held request is still on the link, so the link is not idle.
  const int64_t next = NextLinkDoneNs();
  if (next >= 0 && (*wait_ns < 0 || next < *wait_ns)) *wait_ns = next;
}

}  // namespace ssdtrain::exec
