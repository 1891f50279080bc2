#include "exec/fault_backend.h"

#include <fcntl.h>

#include <cerrno>
#include <deque>
#include <mutex>
#include <vector>

namespace ssdtrain::exec {

struct FaultBackend::Impl {
  std::unique_ptr<IoBackend> inner;
  FaultOptions options;
  int64_t submitted[2] = {0, 0};       // per IoOp, resubmissions included
  std::mutex mu;                       // guards `synthetic` (Reap and Submit run on one thread,
                                       // but keep it simple and safe)
  std::deque<IoCompletion> synthetic;  // faults answered without touching the disk
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

Status FaultBackend::Submit(std::span<const IoRequest> requests) {
  std::vector<IoRequest> pass;
  pass.reserve(requests.size());
  for (IoRequest r : requests) {
    const int dir = r.op == IoOp::kRead ? 0 : 1;
    const int64_t index = impl_->submitted[dir]++;
    const FaultRule* hit = nullptr;
    for (const FaultRule& rule : impl_->options.rules) {
      if (rule.op == r.op && index >= rule.nth && index < rule.nth + rule.count) hit = &rule;
    }
    if (hit == nullptr) {
      pass.push_back(r);
      continue;
    }
    int err = 0;
    switch (hit->kind) {
      case FaultKind::kEio:
        err = EIO;
        break;
      case FaultKind::kEnospc:
        err = ENOSPC;
        break;
      case FaultKind::kEagain:
        err = EAGAIN;
        break;
      case FaultKind::kShort: {
        const int64_t half = (int64_t{r.len} / 2) / kFaultShortAlign * kFaultShortAlign;
        if (half > 0) {
          r.len = static_cast<uint32_t>(half);
          injected_.fetch_add(1);
        }
        pass.push_back(r);
        continue;
      }
    }
    injected_.fetch_add(1);
    std::lock_guard lock(impl_->mu);
    impl_->synthetic.push_back(IoCompletion{r.user_data, -static_cast<int64_t>(err)});
  }
  if (!pass.empty()) SSDTRAIN_RETURN_IF_ERROR(impl_->inner->Submit(pass));
  return Status::Ok();
}

Result<int> FaultBackend::Reap(std::span<IoCompletion> out, int min_complete, int64_t timeout_ns) {
  int n = 0;
  {
    std::lock_guard lock(impl_->mu);
    while (n < static_cast<int>(out.size()) && !impl_->synthetic.empty()) {
      out[static_cast<size_t>(n++)] = impl_->synthetic.front();
      impl_->synthetic.pop_front();
    }
  }
  if (n >= min_complete && n > 0) {
    // Collect whatever else is ready without waiting.
    SSDTRAIN_ASSIGN_OR_RETURN(int more,
                              impl_->inner->Reap(out.subspan(static_cast<size_t>(n)), 0, 0));
    return n + more;
  }
  SSDTRAIN_ASSIGN_OR_RETURN(int more, impl_->inner->Reap(out.subspan(static_cast<size_t>(n)),
                                                         min_complete - n, timeout_ns));
  return n + more;
}

void FaultBackend::Notify() { impl_->inner->Notify(); }

}  // namespace ssdtrain::exec
