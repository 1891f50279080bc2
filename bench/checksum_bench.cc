// CRC32C throughput: the engine checksums every byte it writes and reads, so
// the checksum must keep up with the SSD array (7 drives of the paper's setup
// read ~17 GB/s). Reports bytes/s for one 4 MiB extent (the engine's default
// block) with the dispatching Crc32c (SSE4.2, three lanes, where the CPU has
// it) and with the portable slicing-by-8 tables.
//
//   build/bench/checksum_bench
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "exec/checksum.h"

namespace {

std::vector<unsigned char> Extent() {
  std::vector<unsigned char> data(size_t{4} << 20);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<unsigned char>((i * 2654435761u) >> 13);
  return data;
}

void BM_Crc32c(benchmark::State& state) {
  const std::vector<unsigned char> data = Extent();
  for (auto _ : state) benchmark::DoNotOptimize(ssdtrain::exec::Crc32c(data.data(), data.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * data.size()));
}
BENCHMARK(BM_Crc32c);

void BM_Crc32cPortable(benchmark::State& state) {
  const std::vector<unsigned char> data = Extent();
  for (auto _ : state)
    benchmark::DoNotOptimize(ssdtrain::exec::Crc32cPortable(data.data(), data.size()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * data.size()));
}
BENCHMARK(BM_Crc32cPortable);

}  // namespace

BENCHMARK_MAIN();
