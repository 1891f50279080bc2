// MpiSync's collectives (app/detail/mpi_sync.h): the stages' data-parallel
// groups, agreeing on the ranks' status, the gradients' sums (blocking and
// nonblocking, in pieces) and the reports' gather at rank 0.
#ifdef SSDTRAIN_WITH_MPI

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "app/detail/mpi_sync.h"

namespace ssdtrain::app::detail {

Status MpiError(int code, const std::string& what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return Status::Internal(what + ": " + std::string(text, static_cast<size_t>(len)));
}

Status MpiSync::SplitStages(const traces::Layout& layout) {
  if (layout.world() != size_) {
    return Status::InvalidArgument("tp × cp × dp × pp = " + std::to_string(layout.world()) +
                                   " ranks, but the run has " + std::to_string(size_));
  }
  if (stage_comm_ != MPI_COMM_WORLD) MPI_Comm_free(&stage_comm_);
  stage_comm_ = MPI_COMM_WORLD;
  const std::vector<int64_t> group = layout.DenseGradientGroup(rank_);
  if (static_cast<int>(group.size()) != size_) {
    // One communicator per gradient group (named by its first rank), ordered by rank.
    const int color = static_cast<int>(group.front());
    const int rc = MPI_Comm_split(MPI_COMM_WORLD, color, rank_, &stage_comm_);
    if (rc != MPI_SUCCESS) {
      stage_comm_ = MPI_COMM_WORLD;
      return MpiError(rc, "MPI_Comm_split into the stages' data-parallel groups");
    }
  }
  // The nonblocking sums on a communicator of their own, so that they never
  // match a blocking collective of the stage's (or the world's) by order.
  if (async_comm_ != MPI_COMM_NULL) MPI_Comm_free(&async_comm_);
  const int rc = MPI_Comm_dup(stage_comm_, &async_comm_);
  if (rc != MPI_SUCCESS) {
    async_comm_ = MPI_COMM_NULL;
    return MpiError(rc, "MPI_Comm_dup of the stage's data-parallel group");
  }
  // The routed experts' group (ep > 1), one communicator per group (named by
  // its first rank); every rank takes part in the split, as MPI wants.
  if (expert_comm_ != MPI_COMM_NULL) MPI_Comm_free(&expert_comm_);
  if (layout.ep > 1) {
    // Their buckets' group: the experts' data-parallel group, or at ZeRO 2
    // and 3 the replica group (traces::Layout::ExpertGradientGroup).
    const std::vector<int64_t> experts = layout.ExpertGradientGroup(rank_);
    const int split =
        MPI_Comm_split(MPI_COMM_WORLD, static_cast<int>(experts.front()), rank_, &expert_comm_);
    if (split != MPI_SUCCESS) {
      expert_comm_ = MPI_COMM_NULL;
      return MpiError(split, "MPI_Comm_split into the routed experts' data-parallel groups");
    }
  }
  return Status::Ok();
}

Status MpiSync::Agree(const Status& local) {
  // The lowest failing rank (size_ when none), then its message.
  const int mine = local.ok() ? size_ : rank_;
  int first = size_;
  int rc = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return MpiError(rc, "agreeing on the ranks' status");
  if (first == size_) return Status::Ok();
  std::string message = local.ok() ? "" : local.message();
  int len = static_cast<int>(message.size());
  MPI_Bcast(&len, 1, MPI_INT, first, MPI_COMM_WORLD);
  message.resize(static_cast<size_t>(len));
  MPI_Bcast(message.data(), len, MPI_CHAR, first, MPI_COMM_WORLD);
  if (!local.ok()) return local;
  return Status::Unavailable("rank " + std::to_string(first) + " failed: " + message);
}

Status MpiSync::AllReduceSum(void* host, int64_t count, traces::DType dtype) {
  MPI_Datatype type = MPI_BYTE;
  MPI_Op op = MPI_SUM;
  TypeAndSum(dtype, &type, &op);
  // MPI counts are int: large gradients go in pieces.
  auto* p = static_cast<uint8_t*>(host);
  const int64_t element = traces::DTypeSize(dtype);
  for (int64_t done = 0; done < count; done += kMaxSumElements) {
    const int n = static_cast<int>(std::min(kMaxSumElements, count - done));
    const int rc = MPI_Allreduce(MPI_IN_PLACE, p + done * element, n, type, op, stage_comm_);
    if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Allreduce");
  }
  return Status::Ok();
}

int MpiSync::SumGroupSize(exec::SumGroup group) const {
  MPI_Comm comm = group == exec::SumGroup::kExpertDataParallel ? expert_comm_ : async_comm_;
  int n = 0;
  if (comm == MPI_COMM_NULL || MPI_Comm_size(comm, &n) != MPI_SUCCESS) return 0;
  return n;
}

Status MpiSync::AllReduceSumAsync(void* host, int64_t count, traces::DType dtype,
                                  exec::SumGroup group) {
  const bool experts = group == exec::SumGroup::kExpertDataParallel;
  MPI_Comm comm = experts ? expert_comm_ : async_comm_;
  if (comm == MPI_COMM_NULL) {
    return Status::Internal(experts ? "no communicator for the routed experts' data-parallel "
                                      "group (the layout has ep 1, or SplitStages failed)"
                                    : "no communicator for the nonblocking all-reduces "
                                      "(MPI_Comm_dup failed)");
  }
  MPI_Datatype type = MPI_BYTE;
  MPI_Op op = MPI_SUM;
  TypeAndSum(dtype, &type, &op);
  auto* p = static_cast<uint8_t*>(host);
  const int64_t element = traces::DTypeSize(dtype);
  PostedSum sum;
  Status posted = Status::Ok();
  for (int64_t done = 0; done < count; done += kMaxSumElements) {
    const int n = static_cast<int>(std::min(kMaxSumElements, count - done));
    MPI_Request request = MPI_REQUEST_NULL;
    const int rc = MPI_Iallreduce(MPI_IN_PLACE, p + done * element, n, type, op, comm, &request);
    if (rc != MPI_SUCCESS) {
      posted = MpiError(rc, "MPI_Iallreduce");
      break;
    }
    sum.requests.push_back(request);
  }
  sums_.push_back(std::move(sum));  // the pieces posted complete in WaitAllReduces
  return posted;
}

Status MpiSync::ProgressAllReduces(int64_t* completed) {
  while (sums_completed_ < sums_.size()) {
    std::vector<MPI_Request>& r = sums_[sums_completed_].requests;
    int done = 0;
    const int rc = MPI_Testall(static_cast<int>(r.size()), r.data(), &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Testall of the gradients' all-reduces");
    if (!done) break;
    ++sums_completed_;
  }
  *completed = static_cast<int64_t>(sums_completed_);
  return Status::Ok();
}

Status MpiSync::WaitAllReduces() {
  Status first = Status::Ok();
  for (PostedSum& sum : sums_) {
    const int rc = MPI_Waitall(static_cast<int>(sum.requests.size()), sum.requests.data(),
                               MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS && first.ok()) {
      first = MpiError(rc, "MPI_Waitall of the gradients' all-reduces");
    }
  }
  sums_.clear();
  sums_completed_ = 0;
  return first;
}

Result<std::vector<std::string>> MpiSync::GatherAtRankZero(const std::string& mine) {
  const int64_t len = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lens(static_cast<size_t>(size_));
  int rc = MPI_Gather(&len, 1, MPI_INT64_T, lens.data(), 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return MpiError(rc, "gathering the ranks' report lengths");
  std::vector<std::string> out;
  if (rank_ != 0) {
    for (int64_t at = 0; at < len; at += kMaxPieceBytes) {
      const int n = static_cast<int>(std::min(kMaxPieceBytes, len - at));
      rc = MPI_Send(mine.data() + at, n, MPI_CHAR, 0, kGatherTag, MPI_COMM_WORLD);
      if (rc != MPI_SUCCESS) return MpiError(rc, "sending this rank's report to rank 0");
    }
    return out;
  }
  out.push_back(mine);
  for (int r = 1; r < size_; ++r) {
    std::string& theirs = out.emplace_back(static_cast<size_t>(lens[static_cast<size_t>(r)]), '\0');
    for (int64_t at = 0; at < static_cast<int64_t>(theirs.size()); at += kMaxPieceBytes) {
      const int n =
          static_cast<int>(std::min(kMaxPieceBytes, static_cast<int64_t>(theirs.size()) - at));
      rc = MPI_Recv(theirs.data() + at, n, MPI_CHAR, r, kGatherTag, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        return MpiError(rc, "receiving rank " + std::to_string(r) + "'s report");
      }
    }
  }
  return out;
}

void MpiSync::TypeAndSum(traces::DType dtype, MPI_Datatype* type_out, MPI_Op* op_out) const {
  MPI_Datatype type = MPI_BYTE;
  MPI_Op op = MPI_SUM;
  switch (dtype) {
    case traces::DType::kFp32:
      type = MPI_FLOAT;
      break;
    case traces::DType::kFp16:
      type = MPI_UINT16_T;
      op = sum_fp16_;
      break;
    case traces::DType::kBf16:
      type = MPI_UINT16_T;
      op = sum_bf16_;
      break;
    case traces::DType::kInt32:
      type = MPI_INT32_T;
      break;
    case traces::DType::kInt64:
      type = MPI_INT64_T;
      break;
    case traces::DType::kUint8:
      type = MPI_UINT8_T;
      break;
    case traces::DType::kFp8:
      type = MPI_UINT8_T;
      op = sum_fp8_;
      break;
  }
  *type_out = type;
  *op_out = op;
}

}  // namespace ssdtrain::app::detail

#endif  // SSDTRAIN_WITH_MPI
