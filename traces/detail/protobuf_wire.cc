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

bool ReadVarint(std::string_view bytes, size_t* at, uint64_t* value) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*at >= bytes.size()) return false;
    const auto b = static_cast<uint8_t>(bytes[(*at)++]);
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (b < 0x80) {
      *value = v;
      return true;
    }
  }
  return false;  // more than ten bytes: not a varint
}

bool ParseFields(std::string_view message, std::vector<ProtoField>* fields, std::string* error) {
  fields->clear();
  size_t at = 0;
  while (at < message.size()) {
    const size_t start = at;
    uint64_t tag = 0;
    if (!ReadVarint(message, &at, &tag)) {
      *error = "a field tag at byte " + std::to_string(start) + " runs past the message's end";
      return false;
    }
    ProtoField f;
    f.number = static_cast<int>(tag >> 3);
    const uint64_t type = tag & 7;
    if (f.number == 0 || (tag >> 3) > (uint64_t{1} << 29)) {
      *error = "field number " + std::to_string(tag >> 3) + " at byte " + std::to_string(start) +
               " is not a protobuf field number";
      return false;
    }
    const std::string where =
        "field " + std::to_string(f.number) + " at byte " + std::to_string(start);
    switch (type) {
      case 0:
        f.type = WireType::kVarint;
        if (!ReadVarint(message, &at, &f.value)) {
          *error = where + ": its varint runs past the message's end";
          return false;
        }
        break;
      case 1:
      case 5: {
        const size_t n = type == 1 ? 8 : 4;
        f.type = type == 1 ? WireType::kFixed64 : WireType::kFixed32;
        if (message.size() - at < n) {
          *error = where + ": its " + std::to_string(n) + " bytes run past the message's end";
          return false;
        }
        for (size_t i = 0; i < n; ++i) {
          f.value |= static_cast<uint64_t>(static_cast<uint8_t>(message[at + i])) << (8 * i);
        }
        at += n;
        break;
      }
      case 2: {
        f.type = WireType::kLengthDelimited;
        uint64_t n = 0;
        if (!ReadVarint(message, &at, &n) || n > message.size() - at) {
          *error = where + ": its length runs past the message's end";
          return false;
        }
        f.bytes = message.substr(at, static_cast<size_t>(n));
        at += static_cast<size_t>(n);
        break;
      }
      default:
        *error = where + ": wire type " + std::to_string(type) +
                 " (groups or none) is not one this reader takes";
        return false;
    }
    fields->push_back(f);
  }
  return true;
}

bool UnpackVarints(const ProtoField& f, std::vector<uint64_t>* out) {
  if (f.type == WireType::kVarint) {
    out->push_back(f.value);
    return true;
  }
  if (f.type != WireType::kLengthDelimited) return false;
  size_t at = 0;
  while (at < f.bytes.size()) {
    uint64_t v = 0;
    if (!ReadVarint(f.bytes, &at, &v)) return false;
    out->push_back(v);
  }
  return true;
}

}  // namespace ssdtrain::traces::detail
