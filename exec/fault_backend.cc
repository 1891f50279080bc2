#include "exec/fault_backend.h"

#include <fcntl.h>

#include <cerrno>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace ssdtrain::exec {
namespace {

// kShortUnaligned cuts on this step: a sector, not a 4096-byte block.
constexpr int64_t kUnalignedStep = 512;

}  // namespace

struct FaultBackend::Impl {
  std::unique_ptr<IoBackend> inner;
  FaultOptions options;
  int64_t submitted[2] = {0, 0};  // per IoOp, resubmissions included
  // Submit and Reap run on one thread (io_backend.h), so no lock is needed.
  std::deque<IoCompletion> synthetic;  // faults answered without touching the disk
  std::unordered_map<uint64_t, int64_t> report_at_most;  // kShortUnaligned: user_data -> bytes
  bool fail_next_reap = false;                           // kReapError
};

FaultBackend::FaultBackend(std::unique_ptr<IoBackend> inner, FaultOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->inner = std::move(inner);
  impl_->options = std::move(options);
}

FaultBackend::~FaultBackend() = default;

std::string FaultBackend::Name() const { return "fault(" + impl_->inner->Name() + ")"; }

Status FaultBackend::RegisterBuffers(std::span<const iovec> buffers) {
  return impl_->inner->RegisterBuffers(buffers);
}

int FaultBackend::OpenFile(int dir_fd, const char* name, int flags, int mode) {
  if (impl_->options.refuse_direct && (flags & O_DIRECT) != 0) {
    injected_.fetch_add(1);
    return -EINVAL;
  }
  return impl_->inner->OpenFile(dir_fd, name, flags, mode);
}

void FaultBackend::CloseFile(int fd) { impl_->inner->CloseFile(fd); }

Status FaultBackend::Submit(std::span<const IoRequest> requests, size_t* queued) {
  *queued = 0;
  // Decided per request first; nothing is queued (synthetic or real) until the
  // inner submit has said how many of the pass-through requests it took.
  struct Decision {
    IoRequest request;
    int err = 0;  // > 0: answered synthetically with -err
  };
  std::vector<Decision> decided;
  size_t refused_at = requests.size();
  for (size_t i = 0; i < requests.size(); ++i) {
    IoRequest r = requests[i];
    const int dir = r.op == IoOp::kRead ? 0 : 1;
    const int64_t index = impl_->submitted[dir]++;
    const FaultRule* hit = nullptr;
    for (const FaultRule& rule : impl_->options.rules) {
      if (rule.op == r.op && index >= rule.nth && index < rule.nth + rule.count) hit = &rule;
    }
    Decision d{r, 0};
    if (hit != nullptr) {
      switch (hit->kind) {
        case FaultKind::kEio:
          d.err = EIO;
          break;
        case FaultKind::kEnospc:
          d.err = ENOSPC;
          break;
        case FaultKind::kEagain:
          d.err = EAGAIN;
          break;
        case FaultKind::kShort: {
          const int64_t half = (int64_t{r.len} / 2) / kFaultShortAlign * kFaultShortAlign;
          if (half > 0) {
            d.request.len = static_cast<uint32_t>(half);
            injected_.fetch_add(1);
          }
          break;
        }
        case FaultKind::kShortUnaligned:
          if (r.len > kUnalignedStep * 2) {
            int64_t half = (int64_t{r.len} / 2) / kUnalignedStep * kUnalignedStep;
            if (half % kFaultShortAlign == 0) half -= kUnalignedStep;
            impl_->report_at_most[r.user_data] = half;
            injected_.fetch_add(1);
          }
          break;
        case FaultKind::kSubmitError:
          refused_at = i;
          break;
        case FaultKind::kReapError:
          impl_->fail_next_reap = true;
          injected_.fetch_add(1);
          break;
      }
      if (d.err != 0) injected_.fetch_add(1);
    }
    if (refused_at != requests.size()) break;
    decided.push_back(d);
  }
  std::vector<IoRequest> pass;
  std::vector<size_t> pass_index;  // position of each pass-through request in `decided`
  for (size_t i = 0; i < decided.size(); ++i) {
    if (decided[i].err == 0) {
      pass.push_back(decided[i].request);
      pass_index.push_back(i);
    }
  }
  Status status;
  size_t taken = decided.size();  // requests from the front that are queued
  if (!pass.empty()) {
    size_t inner_queued = 0;
    status = impl_->inner->Submit(pass, &inner_queued);
    if (inner_queued < pass.size()) taken = pass_index[inner_queued];
  }
  if (status.ok() && refused_at != requests.size()) {
    injected_.fetch_add(1);
    status = Status::IoError("injected submit failure at request " + std::to_string(refused_at) +
                             " of " + std::to_string(requests.size()));
  }
  for (size_t i = 0; i < taken; ++i) {
    if (decided[i].err != 0) {
      impl_->synthetic.push_back(
          IoCompletion{decided[i].request.user_data, -static_cast<int64_t>(decided[i].err)});
    }
  }
  for (size_t i = taken; i < decided.size(); ++i) {
    impl_->report_at_most.erase(decided[i].request.user_data);
  }
  outstanding_.fetch_add(static_cast<int64_t>(taken));
  *queued = taken;
  return status;
}

Result<int> FaultBackend::Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_ns) {
  if (impl_->fail_next_reap) {
    impl_->fail_next_reap = false;
    return Status::IoError("injected reap failure");
  }
  int n = 0;
  while (n < static_cast<int>(out.size()) && !impl_->synthetic.empty()) {
    out[static_cast<size_t>(n++)] = impl_->synthetic.front();
    impl_->synthetic.pop_front();
  }
  Result<int> more =
      n >= min_complete && n > 0
          // Collect whatever else is ready without waiting.
          ? impl_->inner->Reap(out.subspan(static_cast<size_t>(n)), 0, 0)
          : impl_->inner->Reap(out.subspan(static_cast<size_t>(n)), min_complete - n, timeout_ns);
  if (!more.ok() && n == 0) return more.status();
  const int inner_n = more.ok() ? *more : 0;
  for (int i = n; i < n + inner_n; ++i) {
    IoCompletion& c = out[static_cast<size_t>(i)];
    auto it = impl_->report_at_most.find(c.user_data);
    if (it == impl_->report_at_most.end()) continue;
    if (c.result > it->second) c.result = it->second;
    impl_->report_at_most.erase(it);
  }
  outstanding_.fetch_sub(n + inner_n);
  return n + inner_n;
}

void FaultBackend::Notify() { impl_->inner->Notify(); }

}  // namespace ssdtrain::exec
