// The fuzz targets' entry points, one per reader (fuzz/README.md). Each takes
// arbitrary bytes, runs the reader and its validator the way the CLI does, and
// returns normally whatever the bytes are: bad input must come back as a
// Status. When an input is accepted, the entry point also checks the reader's
// contract with its writer (what was read, written and read again is the same
// document) and aborts with a message when it does not hold.
//
// The same entry points serve the libFuzzer programs (SSDTRAIN_FUZZ=ON, clang)
// and fuzz_replay_test, which feeds them every file of fuzz/corpus/ and
// fuzz/regressions/ in every build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ssdtrain::fuzz {

using EntryPoint = void (*)(const uint8_t* data, size_t size);

// Trace reader + validator (traces::ParseJson, TraceFromJson), JSON text.
void TraceJson(const uint8_t* data, size_t size);
// The same from CBOR bytes (traces written as .cbor).
void TraceCbor(const uint8_t* data, size_t size);
// Chakra ET reader (traces::TraceFromChakra, the trace format's validator
// behind it); an accepted trace must write back (ToChakra) to bytes that read
// as the same trace.
void TraceChakra(const uint8_t* data, size_t size);
// Plan reader (PlanFromJson) and, when it reads, ValidatePlan against the trace
// of configs/models/tiny-gpt.json (the trace the seed plans were made for).
void Plan(const uint8_t* data, size_t size);
// Model config reader + validator (ModelConfigFromJson).
void ModelConfig(const uint8_t* data, size_t size);
// Hugging Face config.json reader (models::ModelConfigFromHfJson) and, when it
// reads, the mapped config's round trip through our own config format.
void HfConfig(const uint8_t* data, size_t size);
// Hardware config reader + validator (sim::HardwareFromJson).
void HardwareConfig(const uint8_t* data, size_t size);

struct Target {
  std::string name;  // the folder name under fuzz/corpus/ and fuzz/regressions/
  EntryPoint entry;
};
// Every target, in a fixed order.
const std::vector<Target>& Targets();

}  // namespace ssdtrain::fuzz
