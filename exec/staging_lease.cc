#include <utility>

#include "exec/offload_engine.h"

namespace ssdtrain::exec {

StagingLease::StagingLease(StagingLease&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)) {}

StagingLease& StagingLease::operator=(StagingLease&& other) noexcept {
  if (this != &other) {
    if (owner_ != nullptr) owner_->ReleaseStaging(data_, capacity_);
    owner_ = std::exchange(other.owner_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

StagingLease::~StagingLease() {
  if (owner_ != nullptr) owner_->ReleaseStaging(data_, capacity_);
}

}  // namespace ssdtrain::exec
