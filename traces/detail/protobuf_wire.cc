#include "traces/detail/protobuf_wire.h"

#include <cstring>

namespace ssdtrain::traces::detail {

void ProtoWriter::AppendVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void ProtoWriter::Tag(int field, WireType type) {
  AppendVarint(&out_, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(type));
}

void ProtoWriter::UInt64(int field, uint64_t v) {
  Tag(field, WireType::kVarint);
  AppendVarint(&out_, v);
}

void ProtoWriter::Double(int field, double v) {
  Tag(field, WireType::kFixed64);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(bits));
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void ProtoWriter::Bytes(int field, std::string_view bytes) {
  Tag(field, WireType::kLengthDelimited);
  AppendVarint(&out_, bytes.size());
  out_.append(bytes);
}

void ProtoWriter::PackedUInt64(int field, const std::vector<uint64_t>& values) {
  if (values.empty()) return;  // proto3 writes nothing for an empty repeated field
  std::string packed;
  for (uint64_t v : values) AppendVarint(&packed, v);
  Bytes(field, packed);
}

void ProtoWriter::PackedInt64(int field, const std::vector<int64_t>& values) {
  std::vector<uint64_t> u(values.begin(), values.end());
  PackedUInt64(field, u);
}

void ProtoWriter::PackedBool(int field, const std::vector<bool>& values) {
  std::vector<uint64_t> u(values.begin(), values.end());
  PackedUInt64(field, u);
}

}  // namespace ssdtrain::traces::detail
