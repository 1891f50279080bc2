#include "app/mpi_sync.h"

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "exec/host_sum.h"

#ifdef SSDTRAIN_WITH_MPI
#include <mpi.h>

#include "app/detail/mpi_sync.h"
#endif

namespace ssdtrain::app {

bool LaunchedAsRanks() {
  // Open MPI's and the PMI standard's launch variables.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && std::atoi(v) > 1) return true;
  }
  return false;
}

Result<std::unique_ptr<RankSync>> StartRanksIfLaunched() {
  if (!LaunchedAsRanks()) return std::unique_ptr<RankSync>();
  return StartRanks();
}

Result<std::string> MakeRankDir(const std::string& dir, int rank, bool* made) {
  const std::string mine = (std::filesystem::path(dir) / ("rank-" + std::to_string(rank))).string();
  std::error_code ec;
  *made = std::filesystem::create_directory(mine, ec);
  if (ec) return Status::IoError(mine + ": cannot create the rank's directory: " + ec.message());
  return mine;
}

#ifndef SSDTRAIN_WITH_MPI

Result<std::unique_ptr<RankSync>> StartRanks() {
  return Status::Unavailable(
      "started by mpirun, but this ssdtrain was built without MPI (install libopenmpi-dev, "
      "the project's scripts/install-deps.sh does, and rebuild)");
}

#else

namespace {

// MPI has no 16- or 8-bit floating-point sum: these add in fp32 and round back.
void SumFp16(void* in, void* inout, int* len, MPI_Datatype*) {
  exec::SumInto(traces::DType::kFp16, in, inout, *len);
}
void SumBf16(void* in, void* inout, int* len, MPI_Datatype*) {
  exec::SumInto(traces::DType::kBf16, in, inout, *len);
}
void SumFp8(void* in, void* inout, int* len, MPI_Datatype*) {
  exec::SumInto(traces::DType::kFp8, in, inout, *len);
}

}  // namespace

namespace detail {

MpiSync::MpiSync() {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  MPI_Op_create(&SumFp16, /*commute=*/1, &sum_fp16_);
  MPI_Op_create(&SumBf16, /*commute=*/1, &sum_bf16_);
  MPI_Op_create(&SumFp8, /*commute=*/1, &sum_fp8_);
  sent_to_.assign(static_cast<size_t>(size_), 0);
  received_from_.assign(static_cast<size_t>(size_), 0);
  if (MPI_Comm_dup(MPI_COMM_WORLD, &async_comm_) != MPI_SUCCESS) async_comm_ = MPI_COMM_NULL;
}

MpiSync::~MpiSync() {
  (void)WaitAllReduces();  // a failed run's last buckets (exec/step_sync.h)
  Drain();
  if (async_comm_ != MPI_COMM_NULL) MPI_Comm_free(&async_comm_);
  if (expert_comm_ != MPI_COMM_NULL) MPI_Comm_free(&expert_comm_);
  if (stage_comm_ != MPI_COMM_WORLD) MPI_Comm_free(&stage_comm_);
  MPI_Op_free(&sum_fp16_);
  MPI_Op_free(&sum_bf16_);
  MPI_Op_free(&sum_fp8_);
  MPI_Finalize();
}

}  // namespace detail

Result<std::unique_ptr<RankSync>> StartRanks() {
  int provided = 0;
  int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return detail::MpiError(rc, "MPI_Init_thread");
  // Errors come back as return codes, reported with the rank's message.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return std::unique_ptr<RankSync>(new detail::MpiSync());
}

#endif

}  // namespace ssdtrain::app
