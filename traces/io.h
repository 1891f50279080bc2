// Reading and writing traces and other JSON documents: JSON, or CBOR when the
// file name ends in ".cbor". Writes go to a temporary file renamed into place,
// so a failed write never leaves a partial output file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "traces/status.h"
#include "traces/trace.h"

namespace ssdtrain::traces {

nlohmann::json ToJson(const Trace& trace);
// Parses and validates. `source` names the file in messages.
Result<Trace> TraceFromJson(const nlohmann::json& j, const std::string& source);
// A trace file: ssdtrain's JSON or CBOR, a Chakra ET file ssdtrain wrote
// (".et", traces/chakra.h), or a PyTorch execution trace (JSON,
// traces/pytorch_et.h), whose assumptions go to `assumed` when given.
Result<Trace> ReadTrace(const std::string& path, std::vector<std::string>* assumed = nullptr);
Status WriteTrace(const Trace& trace, const std::string& path);
// A file ReadTrace reads as a trace rather than a config: a .et file, or a
// JSON or CBOR document that is ssdtrain's trace or a PyTorch execution trace.
bool IsTraceFile(const std::string& path);

// Any JSON document, by extension (.cbor is CBOR, anything else JSON text).
Result<nlohmann::json> ReadJsonFile(const std::string& path);
// Parses bytes already in memory as ReadJsonFile does (CBOR when `cbor`);
// `source` names the file in messages.
Result<nlohmann::json> ParseJson(std::string_view bytes, bool cbor, const std::string& source);
Status WriteJsonFile(const nlohmann::json& j, const std::string& path);

}  // namespace ssdtrain::traces
