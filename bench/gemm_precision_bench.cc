// gemm_precision_bench: bf16 against FP8 GEMMs on the GPU, at the shapes the
// published FP8 runs' linear layers have (issue 40 item 4: efficiency by
// shape and by precision, measured). For each run of a published-runs file
// (default configs/published/nemo-24.07-dgx-h100.json; SSDTRAIN_GEMM_RUNS
// names another) the model's trace is built at the run's tp, cp, sequence and
// micro-batch with its FP8 recipe (models::BuildTrace, as `plan` builds it),
// and every distinct FP8 GEMM shape (m × n × k, forward and backward) is
// timed three ways through cuBLASLt, each into bf16 with fp32 accumulation,
// TN as cuBLASLt's FP8 kernels require: bf16 operands; E4M3 operands with
// per-tensor scales (the delayed and current recipes' GEMM) as Transformer
// Engine runs its backward GEMMs (split accumulator); and the same with fast
// accumulation, as it runs the forward's (fp8-fastacc). Operands are random (not zeros,
// which draw less power and read fast). Each result's real_time is the GPU's
// (CUDA events); its counters are the GEMM's FLOPs and the peak it is judged
// against (989 bf16, 1979 FP8 dense on an H100 or H200 SXM; set
// SSDTRAIN_GEMM_PEAKS="bf16,fp8" in TFLOP/s for another GPU);
// scripts/gemm_precision_summary.py prints TFLOP/s and efficiency by shape.
//   build-gpu/bench/gemm_precision_bench --benchmark_out=gemm.json --benchmark_out_format=json
// Built only with the CUDA toolkit; scripts/gpu-check.sh runs it on a GPU.
#include <benchmark/benchmark.h>
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <compare>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "cmake/build_paths.h"
#include "models/build_trace.h"
#include "models/model_config.h"

namespace {

using ssdtrain::Result;
using ssdtrain::Status;

// One GEMM: D (m × n) = op(A) (m × k) · B (k × n).
struct Shape {
  int64_t m, n, k;
  auto operator<=>(const Shape&) const = default;
};

// The distinct FP8 GEMM shapes of every run in `path`, each with the runs
// that have it (for the benchmark's name).
Result<std::vector<std::pair<Shape, std::string>>> ShapesOfRuns(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::IoError(path + ": cannot open");
  const nlohmann::json runs = nlohmann::json::parse(in, nullptr, false);
  if (runs.is_discarded() || !runs.contains("runs")) {
    return Status::InvalidArgument(path + ": not a published-runs file (no \"runs\")");
  }
  const std::string recipe = runs.value("fp8", "delayed");
  std::vector<std::pair<Shape, std::string>> out;
  std::set<Shape> seen;
  for (const nlohmann::json& run : runs.at("runs")) {
    const std::string name = run.at("model").get<std::string>();
    const std::string model_path =
        std::string(ssdtrain::ConfiguredSourceDir()) + "/configs/models/" + name + ".json";
    SSDTRAIN_ASSIGN_OR_RETURN(ssdtrain::models::ModelConfig c,
                              ssdtrain::models::LoadModelConfig(model_path));
    c.seq_len = run.at("seq_len").get<int64_t>();
    c.micro_batch = run.at("micro_batch").get<int64_t>();
    c.tp = run.at("tp").get<int64_t>();
    c.cp = run.value("cp", int64_t{1});
    c.sequence_parallel = c.tp > 1;
    c.attention = "flash";
    c.pp = 1;  // the shapes do not depend on the stage
    c.pp_first_layers = c.pp_last_layers = 0;
    c.fp8 = recipe;
    if (c.dtype == "fp32" || c.dtype == "fp16") c.dtype = "bf16";
    SSDTRAIN_ASSIGN_OR_RETURN(const ssdtrain::traces::Trace t, ssdtrain::models::BuildTrace(c));
    const std::string tag = fmt::format("{}/tp{}/cp{}/mb{}", name, c.tp, c.cp, c.micro_batch);
    for (const ssdtrain::traces::Op& op : t.ops) {
      if (!op.gemm || !op.gemm->fp8 || op.gemm->batch != 1) continue;
      const Shape s{op.gemm->m, op.gemm->n, op.gemm->k};
      if (seen.insert(s).second) out.emplace_back(s, tag);
    }
  }
  return out;
}

#define CUDA_OK(call)                                                                 \
  do {                                                                                \
    const cudaError_t e = (call);                                                     \
    if (e != cudaSuccess) return fmt::format("{}: {}", #call, cudaGetErrorString(e)); \
  } while (0)
#define LT_OK(call)                                                           \
  do {                                                                        \
    const cublasStatus_t e = (call);                                          \
    if (e != CUBLAS_STATUS_SUCCESS)                                           \
      return fmt::format("{}: cuBLAS status {}", #call, static_cast<int>(e)); \
  } while (0)

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLASLt's advice for Hopper

// Device buffers of random operands, a GEMM's descriptors and its algorithm.
class Gemm {
 public:
  ~Gemm() {
    for (void* p : {a_, b_, d_, workspace_, scales_}) cudaFree(p);
    if (pref_) cublasLtMatmulPreferenceDestroy(pref_);
    for (cublasLtMatrixLayout_t l : {a_desc_, b_desc_, d_desc_}) {
      if (l) cublasLtMatrixLayoutDestroy(l);
    }
    if (desc_) cublasLtMatmulDescDestroy(desc_);
    if (lt_) cublasLtDestroy(lt_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  // "" when set up; else what failed.
  std::string SetUp(const Shape& s, bool fp8, bool fast_accumulation) {
    const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
    const size_t in_bytes = fp8 ? 1 : 2;
    CUDA_OK(cudaStreamCreate(&stream_));
    LT_OK(cublasLtCreate(&lt_));
    CUDA_OK(cudaMalloc(&a_, static_cast<size_t>(s.m * s.k) * in_bytes));
    CUDA_OK(cudaMalloc(&b_, static_cast<size_t>(s.k * s.n) * in_bytes));
    CUDA_OK(cudaMalloc(&d_, static_cast<size_t>(s.m * s.n) * 2));
    CUDA_OK(cudaMalloc(&workspace_, kWorkspaceBytes));
    CUDA_OK(cudaMalloc(&scales_, 2 * sizeof(float)));
    const float ones[2] = {1.0f, 1.0f};
    CUDA_OK(cudaMemcpy(scales_, ones, sizeof(ones), cudaMemcpyHostToDevice));
    if (std::string e = Fill(a_, static_cast<size_t>(s.m * s.k), fp8); !e.empty()) return e;
    if (std::string e = Fill(b_, static_cast<size_t>(s.k * s.n), fp8); !e.empty()) return e;
    LT_OK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, n = CUBLAS_OP_N;
    LT_OK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    LT_OK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &n, sizeof(n)));
    if (fp8) {
      const float* a_scale = static_cast<float*>(scales_);
      const float* b_scale = a_scale + 1;
      LT_OK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                           sizeof(a_scale)));
      LT_OK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                           sizeof(b_scale)));
      const int8_t fast = fast_accumulation ? 1 : 0;
      LT_OK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast,
                                           sizeof(fast)));
    }
    // Column-major: A stored k × m (used transposed), B k × n, D m × n.
    LT_OK(cublasLtMatrixLayoutCreate(&a_desc_, in_type, static_cast<uint64_t>(s.k),
                                     static_cast<uint64_t>(s.m), s.k));
    LT_OK(cublasLtMatrixLayoutCreate(&b_desc_, in_type, static_cast<uint64_t>(s.k),
                                     static_cast<uint64_t>(s.n), s.k));
    LT_OK(cublasLtMatrixLayoutCreate(&d_desc_, CUDA_R_16BF, static_cast<uint64_t>(s.m),
                                     static_cast<uint64_t>(s.n), s.m));
    LT_OK(cublasLtMatmulPreferenceCreate(&pref_));
    const size_t ws = kWorkspaceBytes;
    LT_OK(cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                               sizeof(ws)));
    int found = 0;
    LT_OK(cublasLtMatmulAlgoGetHeuristic(lt_, desc_, a_desc_, b_desc_, d_desc_, d_desc_, pref_, 1,
                                         &algo_, &found));
    if (found == 0) return "cuBLASLt has no algorithm for this shape";
    return Run();  // warm-up
  }

  std::string Run() {
    const float alpha = 1.0f, beta = 0.0f;
    LT_OK(cublasLtMatmul(lt_, desc_, &alpha, a_, a_desc_, b_, b_desc_, &beta, d_, d_desc_, d_,
                         d_desc_, &algo_.algo, workspace_, kWorkspaceBytes, stream_));
    return "";
  }
  cudaStream_t stream() const { return stream_; }

 private:
  // Random finite values: E4M3 bytes with the top exponent bit clear (no NaN),
  // bf16 in ±[1, 2).
  static std::string Fill(void* dst, size_t elems, bool fp8) {
    std::mt19937_64 rng(elems);
    if (fp8) {
      std::vector<uint8_t> host(elems);
      for (uint8_t& x : host) x = static_cast<uint8_t>(rng()) & 0xBF;
      CUDA_OK(cudaMemcpy(dst, host.data(), elems, cudaMemcpyHostToDevice));
    } else {
      std::vector<uint16_t> host(elems);
      for (uint16_t& x : host) x = static_cast<uint16_t>((rng() & 0x807F) | 0x3F80);
      CUDA_OK(cudaMemcpy(dst, host.data(), elems * 2, cudaMemcpyHostToDevice));
    }
    return "";
  }

  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_desc_ = nullptr, b_desc_ = nullptr, d_desc_ = nullptr;
  cublasLtMatmulPreference_t pref_ = nullptr;
  cublasLtMatmulHeuristicResult_t algo_{};
  void *a_ = nullptr, *b_ = nullptr, *d_ = nullptr, *workspace_ = nullptr, *scales_ = nullptr;
};

void BM_Gemm(benchmark::State& state, Shape s, bool fp8, bool fast_accumulation,
             double peak_tflops) {
  Gemm gemm;
  if (std::string e = gemm.SetUp(s, fp8, fast_accumulation); !e.empty()) {
    state.SkipWithError(e.c_str());
    return;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (auto _ : state) {
    cudaEventRecord(start, gemm.stream());
    if (std::string e = gemm.Run(); !e.empty()) {
      state.SkipWithError(e.c_str());
      break;
    }
    cudaEventRecord(stop, gemm.stream());
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const double flops =
      2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
  // The rate from the GPU's time (real_time, the events'), not a rate counter
  // (Google Benchmark divides those by the CPU time): flops / real_time.
  state.counters["flops"] = flops;
  state.counters["peak_TFLOPs"] = peak_tflops;
}

}  // namespace

int main(int argc, char** argv) {
  const char* runs_env = std::getenv("SSDTRAIN_GEMM_RUNS");
  const std::string runs = runs_env != nullptr && *runs_env != '\0'
                               ? runs_env
                               : std::string(ssdtrain::ConfiguredSourceDir()) +
                                     "/configs/published/nemo-24.07-dgx-h100.json";
  double bf16_peak = 989, fp8_peak = 1979;
  if (const char* peaks = std::getenv("SSDTRAIN_GEMM_PEAKS"); peaks != nullptr) {
    if (std::sscanf(peaks, "%lf,%lf", &bf16_peak, &fp8_peak) != 2) {
      std::cerr << "gemm_precision_bench: SSDTRAIN_GEMM_PEAKS: expected \"bf16,fp8\" in TFLOP/s, "
                   "got \""
                << peaks << "\"\n";
      return 2;
    }
  }
  Result<std::vector<std::pair<Shape, std::string>>> shapes = ShapesOfRuns(runs);
  if (!shapes.ok()) {
    std::cerr << "gemm_precision_bench: " << shapes.status().message() << "\n";
    return 2;
  }
  for (const auto& [s, tag] : *shapes) {
    for (const std::string_view mode : {"bf16", "fp8", "fp8-fastacc"}) {
      const bool fp8 = mode != "bf16";
      const std::string name = fmt::format("BM_Gemm/{}/{}x{}x{}/{}", mode, s.m, s.n, s.k, tag);
      benchmark::RegisterBenchmark(name.c_str(), BM_Gemm, s, fp8, mode == "fp8-fastacc",
                                   fp8 ? fp8_peak : bf16_peak)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
