#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "exec/checksum.h"

namespace ssdtrain::exec {
namespace {

TEST(Crc32c, MatchesTheStandardCheckValue) {
  // The CRC-32C catalogue check: CRC of the ASCII bytes "123456789".
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
}

TEST(Crc32c, MatchesTheIscsiTestVectors) {
  // RFC 3720 B.4: 32 zero bytes, 32 0xFF bytes, bytes 0..31 ascending.
  std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF), ascending(32);
  for (int i = 0; i < 32; ++i) ascending[static_cast<size_t>(i)] = static_cast<unsigned char>(i);
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(ascending.data(), 32), 0x46DD794Eu);
}

TEST(Crc32c, HardwareAndTablePathsAgree) {
  // Crc32c may use the SSE4.2 instruction; it must equal the table version at
  // every length and start offset (head, 8-byte body, tail).
  std::vector<unsigned char> data(1000);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  for (size_t start = 0; start < 8; ++start) {
    for (size_t n = 0; n + start <= data.size(); n += 37) {
      EXPECT_EQ(Crc32c(data.data() + start, n, 0x1234),
                Crc32cPortable(data.data() + start, n, 0x1234));
    }
  }
  EXPECT_EQ(Crc32cPortable("123456789", 9), 0xE3069283u);
}

TEST(Crc32c, InterleavedLanesAgreeWithTheTables) {
  // Past 24 KiB the hardware path runs three lanes and joins them; every round
  // count, a tail after the rounds, and unaligned starts must match.
  std::vector<unsigned char> data((size_t{3} << 16) + 100);
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<unsigned char>((i * 2654435761u) >> 11);
  for (size_t start : {size_t{0}, size_t{3}, size_t{8}}) {
    for (size_t n :
         {size_t{24575}, size_t{24576}, size_t{24577}, size_t{3} * 24576 + 13, size_t{3} << 16}) {
      EXPECT_EQ(Crc32c(data.data() + start, n, 0xDEADBEEF),
                Crc32cPortable(data.data() + start, n, 0xDEADBEEF))
          << "start " << start << " length " << n;
    }
  }
}

TEST(Crc32c, EmptyInputIsZero) { EXPECT_EQ(Crc32c("", 0), 0u); }

TEST(Crc32c, PiecewiseEqualsOneShotAtEverySplitAndAlignment) {
  // Exercises the byte-wise head, the 8-byte body and the tail at every offset.
  std::string data;
  for (int i = 0; i < 300; ++i) data.push_back(static_cast<char>(i * 131 + 7));
  for (size_t start = 0; start < 9; ++start) {
    const char* p = data.data() + start;
    const size_t n = data.size() - start;
    const uint32_t whole = Crc32c(p, n);
    for (size_t split = 0; split <= n; split += 13) {
      EXPECT_EQ(Crc32c(p + split, n - split, Crc32c(p, split)), whole)
          << "start " << start << " split " << split;
    }
  }
}

TEST(Crc32c, DetectsASingleFlippedBit) {
  std::vector<char> data(4096, 'x');
  const uint32_t before = Crc32c(data.data(), data.size());
  data[1234] ^= 0x10;
  EXPECT_NE(Crc32c(data.data(), data.size()), before);
}

}  // namespace
}  // namespace ssdtrain::exec
