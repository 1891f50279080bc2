// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum
// the offload engine stores per tensor extent. The portable version uses
// slicing-by-8 tables built at compile time and needs no SSE4.2; on x86-64 CPUs
// that have SSE4.2 (checked at run time) Crc32c uses the crc32 instruction on
// three interleaved lanes, which computes the same function ~10x faster, so
// checksums keep up with an NVMe array (figures: bench/checksum_bench.cc). Check value:
// Crc32c("123456789") == 0xE3069283.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ssdtrain::exec {

// CRC32C of [data, data + n). To checksum in pieces, pass the previous result
// as `crc`: Crc32c(b, nb, Crc32c(a, na)) == Crc32c(a ++ b).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
// The table version, on every CPU (Crc32c gives the same results).
uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc = 0);

}  // namespace ssdtrain::exec
