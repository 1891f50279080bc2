#include "app/mpi_sync.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#ifdef SSDTRAIN_WITH_MPI
#include <mpi.h>
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

#ifndef SSDTRAIN_WITH_MPI

Result<std::unique_ptr<RankSync>> StartRanks() {
  return Status::Unavailable(
      "started by mpirun, but this ssdtrain was built without MPI (install libopenmpi-dev, "
      "the project's scripts/install-deps.sh does, and rebuild)");
}

#else

namespace {

float HalfToFloat(uint16_t h) {
  _Float16 f;
  std::memcpy(&f, &h, 2);
  return static_cast<float>(f);
}
uint16_t FloatToHalf(float x) {
  const _Float16 f = static_cast<_Float16>(x);
  uint16_t h;
  std::memcpy(&h, &f, 2);
  return h;
}
float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t FloatToBf16(float x) {  // round to nearest even
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// MPI has no 16-bit floating-point sum: these add in fp32 and round back.
void SumFp16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = FloatToHalf(HalfToFloat(a[i]) + HalfToFloat(b[i]));
}
void SumBf16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = FloatToBf16(Bf16ToFloat(a[i]) + Bf16ToFloat(b[i]));
}

Status MpiError(int code, const std::string& what) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return Status::Internal(what + ": " + std::string(text, static_cast<size_t>(len)));
}

class MpiSync final : public RankSync {
 public:
  MpiSync() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Op_create(&SumFp16, /*commute=*/1, &sum_fp16_);
    MPI_Op_create(&SumBf16, /*commute=*/1, &sum_bf16_);
  }
  ~MpiSync() override {
    MPI_Op_free(&sum_fp16_);
    MPI_Op_free(&sum_bf16_);
    MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status Agree(const Status& local) override {
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

  Status AllReduceSum(void* host, int64_t count, traces::DType dtype) override {
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
    }
    // MPI counts are int: large gradients go in pieces.
    auto* p = static_cast<uint8_t*>(host);
    const int64_t element = traces::DTypeSize(dtype);
    constexpr int64_t kPiece = int64_t{1} << 30;
    for (int64_t done = 0; done < count; done += kPiece) {
      const int n = static_cast<int>(std::min(kPiece, count - done));
      const int rc = MPI_Allreduce(MPI_IN_PLACE, p + done * element, n, type, op, MPI_COMM_WORLD);
      if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Allreduce");
    }
    return Status::Ok();
  }

  Result<std::vector<std::string>> GatherAtRankZero(const std::string& mine) override {
    int len = static_cast<int>(mine.size());
    std::vector<int> lens(static_cast<size_t>(size_));
    int rc = MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return MpiError(rc, "gathering the ranks' reports");
    std::vector<int> offsets(static_cast<size_t>(size_), 0);
    int total = 0;
    for (int r = 0; r < size_; ++r) {
      offsets[static_cast<size_t>(r)] = total;
      total += lens[static_cast<size_t>(r)];
    }
    std::string all(static_cast<size_t>(rank_ == 0 ? total : 0), '\0');
    rc = MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR,
                     0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return MpiError(rc, "gathering the ranks' reports");
    std::vector<std::string> out;
    if (rank_ != 0) return out;
    for (int r = 0; r < size_; ++r) {
      out.push_back(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                               static_cast<size_t>(lens[static_cast<size_t>(r)])));
    }
    return out;
  }

 private:
  int rank_ = 0, size_ = 1;
  MPI_Op sum_fp16_ = MPI_OP_NULL, sum_bf16_ = MPI_OP_NULL;
};

}  // namespace

Result<std::unique_ptr<RankSync>> StartRanks() {
  int provided = 0;
  int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS) return MpiError(rc, "MPI_Init_thread");
  // Errors come back as return codes, reported with the rank's message.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return std::unique_ptr<RankSync>(new MpiSync());
}

#endif

}  // namespace ssdtrain::app
