#include "exec/checksum.h"

#include <array>
#include <cstring>

namespace ssdtrain::exec {
namespace {

constexpr uint32_t kCastagnoliReflected = 0x82F63B78u;
constexpr int kSlices = 8;  // slicing-by-8: 8 bytes per step, 8 KiB of tables

using Tables = std::array<std::array<uint32_t, 256>, kSlices>;

constexpr Tables MakeTables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kCastagnoliReflected : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < kSlices; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
  return t;
}

constexpr Tables kTables = MakeTables();

#if defined(__x86_64__)
// The SSE4.2 crc32 instruction computes the same CRC32C 8 bytes at a time. One
// chain of them is bound by the instruction's 3-cycle latency (~5-6 GB/s at
// 2 GHz, below one NVMe array's read rate), so long buffers run three
// independent chains over three adjacent lanes and join them: the raw CRC
// register is linear, so CRC(A ++ B from s) = Z(CRC(A from s), |B|) ^ CRC(B
// from 0), where Z(c, n) is the register after n zero bytes from c.
constexpr size_t kLane = 8192;  // bytes per chain and round

__attribute__((target("sse4.2"))) uint32_t ZeroBytesSse42(uint32_t c, size_t n) {
  uint64_t c64 = c;
  for (size_t i = 0; i < n / 8; ++i) c64 = __builtin_ia32_crc32di(c64, 0);
  return static_cast<uint32_t>(c64);
}

// Z(c, kLane) by bytes of c: Z is linear in c, so four 256-entry tables built
// from the 32 single-bit registers give it in four lookups.
struct LaneShift {
  std::array<std::array<uint32_t, 256>, 4> t;
  uint32_t operator()(uint32_t c) const {
    return t[0][c & 0xFF] ^ t[1][(c >> 8) & 0xFF] ^ t[2][(c >> 16) & 0xFF] ^ t[3][c >> 24];
  }
};

const LaneShift& TheLaneShift() {
  static const LaneShift shift = [] {
    std::array<uint32_t, 32> bit{};
    for (int b = 0; b < 32; ++b) bit[b] = ZeroBytesSse42(uint32_t{1} << b, kLane);
    LaneShift s{};
    for (int k = 0; k < 4; ++k) {
      for (uint32_t v = 0; v < 256; ++v) {
        uint32_t r = 0;
        for (int b = 0; b < 8; ++b) {
          if ((v >> b) & 1) r ^= bit[8 * k + b];
        }
        s.t[k][v] = r;
      }
    }
    return s;
  }();
  return shift;
}

__attribute__((target("sse4.2"))) uint32_t Crc32cSse42(const unsigned char* p, size_t n,
                                                       uint32_t c) {
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = __builtin_ia32_crc32qi(c, *p++);
    --n;
  }
  uint64_t c64 = c;
  if (n >= 3 * kLane) {
    const LaneShift& shift = TheLaneShift();
    do {
      uint64_t a = c64, b = 0, d = 0;
      for (size_t i = 0; i < kLane; i += 8) {
        uint64_t wa, wb, wd;
        std::memcpy(&wa, p + i, 8);
        std::memcpy(&wb, p + kLane + i, 8);
        std::memcpy(&wd, p + 2 * kLane + i, 8);
        a = __builtin_ia32_crc32di(a, wa);
        b = __builtin_ia32_crc32di(b, wb);
        d = __builtin_ia32_crc32di(d, wd);
      }
      const uint32_t ab = shift(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
      c64 = shift(ab) ^ static_cast<uint32_t>(d);
      p += 3 * kLane;
      n -= 3 * kLane;
    } while (n >= 3 * kLane);
  }
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c64 = __builtin_ia32_crc32di(c64, word);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n-- > 0) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}

const bool kHaveSse42 = __builtin_cpu_supports("sse4.2");
#endif

}  // namespace

uint32_t Crc32cPortable(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
    --n;
  }
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // little-endian hosts (x86-64, aarch64)
    const uint32_t lo = static_cast<uint32_t>(word) ^ c;
    const uint32_t hi = static_cast<uint32_t>(word >> 32);
    c = kTables[7][lo & 0xFF] ^ kTables[6][(lo >> 8) & 0xFF] ^ kTables[5][(lo >> 16) & 0xFF] ^
        kTables[4][lo >> 24] ^ kTables[3][hi & 0xFF] ^ kTables[2][(hi >> 8) & 0xFF] ^
        kTables[1][(hi >> 16) & 0xFF] ^ kTables[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
  return ~c;
}

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
#if defined(__x86_64__)
  if (kHaveSse42) return ~Crc32cSse42(static_cast<const unsigned char*>(data), n, ~crc);
#endif
  return Crc32cPortable(data, n, crc);
}

}  // namespace ssdtrain::exec
