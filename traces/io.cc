#include "traces/io.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "traces/chakra.h"
#include "traces/pytorch_et.h"

namespace ssdtrain::traces {
namespace {

using nlohmann::json;

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Deeper nesting is refused before it is built. nlohmann's CBOR reader recurses
// once per level, so a file of nested one-element arrays (a few bytes a level)
// overflowed the stack (found by the trace_cbor fuzzer); our documents nest a
// handful of levels.
constexpr int kMaxJsonDepth = 128;

// nlohmann's own DOM builder with a nesting limit: start_object and start_array
// past kMaxJsonDepth stop the parse (the reader returns at once, unwinding).
class DepthLimitedDomBuilder {
 public:
  explicit DepthLimitedDomBuilder(json& root) : dom_(root) {}

  bool too_deep() const { return too_deep_; }

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return dom_.number_float(v, s);
  }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool key(json::string_t& v) { return dom_.key(v); }
  bool start_object(std::size_t n) { return Enter() && dom_.start_object(n); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return Enter() && dom_.start_array(n); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string& token,
                   const nlohmann::detail::exception& e) {
    return dom_.parse_error(pos, token, e);  // throws e: the caller reports its text
  }

 private:
  bool Enter() {
    if (++depth_ > kMaxJsonDepth) {
      too_deep_ = true;
      return false;
    }
    return true;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  int depth_ = 0;
  bool too_deep_ = false;
};

}  // namespace

Result<json> ReadJsonFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::NotFound(path + ": cannot open (" + std::strerror(errno) + ")");
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::IoError(path + ": read failed (" + std::strerror(errno) + ")");
  return ParseJson(bytes, EndsWith(path, ".cbor"), path);
}

Result<json> ParseJson(std::string_view bytes, bool cbor, const std::string& source) {
  const char* format = cbor ? "CBOR" : "JSON";
  json doc;
  DepthLimitedDomBuilder builder(doc);
  try {
    const bool ok = json::sax_parse(bytes.begin(), bytes.end(), &builder,
                                    cbor ? json::input_format_t::cbor : json::input_format_t::json);
    if (builder.too_deep()) {
      return Status::InvalidArgument(source + ": not valid " + format + ": nested deeper than " +
                                     std::to_string(kMaxJsonDepth) +
                                     " arrays and objects (a trace, plan or config needs " +
                                     "fewer than 10)");
    }
    if (!ok) return Status::InvalidArgument(source + ": not valid " + format);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(source + ": not valid " + format + ": " + e.what());
  }
  return doc;
}

namespace {

// The bytes WriteJsonFile writes: CBOR for a .cbor path, else indented JSON
// text. nlohmann throws on what it cannot encode (a string that is not UTF-8):
// that becomes an error naming the file.
Result<std::string> Serialize(const json& j, const std::string& path) {
  try {
    if (EndsWith(path, ".cbor")) {
      std::vector<uint8_t> bytes = json::to_cbor(j);
      return std::string(bytes.begin(), bytes.end());
    }
    return j.dump(1) + "\n";
  } catch (const json::exception& e) {
    return Status::InvalidArgument(path + ": cannot serialize the document (" + e.what() + ")");
  }
}

}  // namespace

Status WriteJsonFile(const json& j, const std::string& path) {
  namespace fs = std::filesystem;
  // Serialized before any file exists, so that a refusal leaves nothing.
  SSDTRAIN_ASSIGN_OR_RETURN(const std::string bytes, Serialize(j, path));
  // Write beside the target, then rename: a failure never leaves a partial file.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::IoError(path + ": cannot create (" + std::strerror(errno) + ")");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      const int err = errno;
      std::error_code ignored;
      fs::remove(tmp, ignored);
      return Status::IoError(path + ": write failed (" + std::strerror(err) + ")");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;  // the rename's error is the one to report
    fs::remove(tmp, ignored);
    return Status::IoError(path + ": cannot move into place (" + ec.message() + ")");
  }
  return Status::Ok();
}

Result<Trace> ReadTrace(const std::string& path, std::vector<std::string>* assumed) {
  if (IsChakraPath(path)) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Status::NotFound(path + ": cannot open (" + std::strerror(errno) + ")");
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return Status::IoError(path + ": read failed (" + std::strerror(errno) + ")");
    return TraceFromChakra(bytes, path);
  }
  SSDTRAIN_ASSIGN_OR_RETURN(json j, ReadJsonFile(path));
  if (IsPytorchEt(j)) {
    SSDTRAIN_ASSIGN_OR_RETURN(PytorchEtImport imported, TraceFromPytorchEt(j, path));
    if (assumed != nullptr) *assumed = std::move(imported.assumed);
    return std::move(imported.trace);
  }
  return TraceFromJson(j, path);
}

bool IsTraceFile(const std::string& path) {
  if (IsChakraPath(path)) return true;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  Result<json> j = ReadJsonFile(path);
  if (!j.ok()) return false;
  if (IsPytorchEt(*j)) return true;
  const auto format = j->is_object() ? j->find("format") : j->end();
  return format != j->end() && format->is_string() && *format == kTraceFormatName;
}

Status WriteTrace(const Trace& trace, const std::string& path) {
  return WriteJsonFile(ToJson(trace), path);
}

}  // namespace ssdtrain::traces
