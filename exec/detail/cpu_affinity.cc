#include "exec/detail/cpu_affinity.h"

#include <pthread.h>
#include <sched.h>

#include <cerrno>
#include <cstring>

namespace ssdtrain::exec::detail {

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

Status PinCurrentThread(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE) {
      return Status::InvalidArgument("CPU " + std::to_string(c) + " is out of range");
    }
    CPU_SET(c, &set);
  }
  const int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  if (rc != 0) {
    return Status::Unavailable("pinning a thread to CPUs " + FormatCpus(cpus) +
                               " failed: " + std::strerror(rc));
  }
  return Status::Ok();
}

CoreSplit SplitCores(const std::vector<int>& allowed, int compute_threads) {
  CoreSplit split;
  if (compute_threads < 1 || static_cast<int>(allowed.size()) <= compute_threads) return split;
  split.compute.assign(allowed.begin(), allowed.begin() + compute_threads);
  split.helpers.assign(allowed.begin() + compute_threads, allowed.end());
  return split;
}

std::string FormatCpus(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out.push_back(',');
    out.append(std::to_string(cpus[i]));
    if (j > i) {
      out.push_back('-');
      out.append(std::to_string(cpus[j]));
    }
    i = j + 1;
  }
  return out;
}

ScopedThreadAffinity::ScopedThreadAffinity(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  previous_ = AllowedCpus();
  status_ = PinCurrentThread(cpus);
  active_ = status_.ok();
}

ScopedThreadAffinity::~ScopedThreadAffinity() {
  if (active_) (void)PinCurrentThread(previous_);
}

}  // namespace ssdtrain::exec::detail
