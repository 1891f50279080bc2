// Protocol Buffers' wire format, written by hand (protobuf.dev, "Encoding"):
// varints, field tags, fixed 64-bit values and length-delimited fields, the
// parts the Chakra execution-trace files need (traces/chakra.h). No protobuf
// library: a field is its number and wire type, and a message its fields in
// any order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ssdtrain::traces::detail {

enum class WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

class ProtoWriter {
 public:
  // A varint field (uint64, int64 as two's complement, bool, enum).
  void UInt64(int field, uint64_t v);
  void Int64(int field, int64_t v) { UInt64(field, static_cast<uint64_t>(v)); }
  void Bool(int field, bool v) { UInt64(field, v ? 1 : 0); }
  void Double(int field, double v);
  void Bytes(int field, std::string_view bytes);  // string, bytes, a message
  void Message(int field, const ProtoWriter& m) { Bytes(field, m.bytes()); }
  // Packed repeated varints (proto3's default for repeated scalars).
  void PackedUInt64(int field, const std::vector<uint64_t>& values);
  void PackedInt64(int field, const std::vector<int64_t>& values);
  void PackedBool(int field, const std::vector<bool>& values);

  const std::string& bytes() const { return out_; }

  // A varint on its own: the length before each message of a stream.
  static void AppendVarint(std::string* out, uint64_t v);

 private:
  void Tag(int field, WireType type);
  std::string out_;
};

// One field of a message as read: its number and wire type, the value of a
// varint or fixed field, the bytes of a length-delimited one.
struct ProtoField {
  int number = 0;
  WireType type = WireType::kVarint;
  uint64_t value = 0;      // kVarint, kFixed64, kFixed32
  std::string_view bytes;  // kLengthDelimited: a view into the message
};

// Splits `message` into its fields, in order. False, with `*error` saying
// what and at which byte, when it is not a well-formed message (a varint or
// a length past the end, a wire type protobuf does not have, a field number 0).
bool ParseFields(std::string_view message, std::vector<ProtoField>* fields, std::string* error);

// A packed repeated varint field's values (or one unpacked value): false when
// its bytes are not varints.
bool UnpackVarints(const ProtoField& f, std::vector<uint64_t>* out);

// Reads the varint at `*at` of `bytes` and moves `*at` past it; false past the end.
bool ReadVarint(std::string_view bytes, size_t* at, uint64_t* value);

}  // namespace ssdtrain::traces::detail
