#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "traces/io.h"
#include "traces/tests/small_trace.h"
#include "traces/validate.h"

namespace ssdtrain::traces {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("ssdtrain-traces-test-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

TEST(TraceIo, SmallTraceIsValid) { EXPECT_TRUE(Validate(testing::SmallTrace(), "small").ok()); }

TEST(TraceIo, JsonRoundTripIsExact) {
  const Trace t = testing::SmallTrace();
  const nlohmann::json j = ToJson(t);
  Result<Trace> back = TraceFromJson(j, "mem");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ToJson(*back), j);
  EXPECT_EQ(Fingerprint(*back), Fingerprint(t));
}

TEST(TraceIo, FileRoundTripJsonCborJsonIsUnchanged) {
  TempDir dir;
  const Trace t = testing::SmallTrace();
  ASSERT_TRUE(WriteTrace(t, dir.File("a.json")).ok());
  Result<Trace> a = ReadTrace(dir.File("a.json"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(WriteTrace(*a, dir.File("b.cbor")).ok());
  Result<Trace> b = ReadTrace(dir.File("b.cbor"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE(WriteTrace(*b, dir.File("c.json")).ok());
  std::ifstream fa(dir.File("a.json")), fc(dir.File("c.json"));
  std::string sa((std::istreambuf_iterator<char>(fa)), {}),
      sc((std::istreambuf_iterator<char>(fc)), {});
  EXPECT_EQ(sa, sc);
  // CBOR is smaller than JSON text for the same trace.
  EXPECT_LT(fs::file_size(dir.File("b.cbor")), fs::file_size(dir.File("a.json")));
}

TEST(TraceIo, MissingFileNamesThePath) {
  Result<Trace> r = ReadTrace("/nonexistent/trace.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/trace.json"), std::string::npos);
}

TEST(TraceIo, NotJsonNamesTheFile) {
  TempDir dir;
  std::ofstream(dir.File("bad.json")) << "{ not json";
  Result<Trace> r = ReadTrace(dir.File("bad.json"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bad.json: not valid JSON"), std::string::npos)
      << r.status().message();
}

TEST(TraceIo, ParseJsonFromMemoryNamesTheSourceAndFormat) {
  // The in-memory parser (what the fuzz targets call) is ReadJsonFile's: the
  // same document from JSON text and from its CBOR bytes; bad bytes name the
  // source and the format expected.
  const nlohmann::json doc = ToJson(testing::SmallTrace());
  const std::string text = doc.dump();
  Result<nlohmann::json> from_text = ParseJson(text, /*cbor=*/false, "t.json");
  ASSERT_TRUE(from_text.ok()) << from_text.status().ToString();
  EXPECT_EQ(*from_text, doc);
  const std::vector<uint8_t> cbor = nlohmann::json::to_cbor(doc);
  Result<nlohmann::json> from_cbor = ParseJson(
      std::string_view(reinterpret_cast<const char*>(cbor.data()), cbor.size()), true, "t.cbor");
  ASSERT_TRUE(from_cbor.ok()) << from_cbor.status().ToString();
  EXPECT_EQ(*from_cbor, doc);
  Result<nlohmann::json> bad_cbor = ParseJson(text, /*cbor=*/true, "t.cbor");
  ASSERT_FALSE(bad_cbor.ok());
  EXPECT_NE(bad_cbor.status().message().find("t.cbor: not valid CBOR"), std::string::npos)
      << bad_cbor.status().message();
}

TEST(TraceIo, NestingPastTheLimitIsRefusedNotRecursedInto) {
  // nlohmann's CBOR reader recurses once per level: 100000 nested one-element
  // arrays (0x81 each) overflowed the stack before the limit (trace_cbor fuzzer).
  // Both formats stop at the same depth with the same message; 128 levels read.
  auto nested_cbor = [](size_t levels) {
    std::string bytes(levels, '\x81');
    bytes += '\xf6';  // null
    return bytes;
  };
  auto nested_json = [](size_t levels) {
    return std::string(levels, '[') + "null" + std::string(levels, ']');
  };
  for (const bool cbor : {true, false}) {
    SCOPED_TRACE(cbor ? "CBOR" : "JSON");
    const std::string source = cbor ? "deep.cbor" : "deep.json";
    auto parse = [&](size_t levels) {
      return ParseJson(cbor ? nested_cbor(levels) : nested_json(levels), cbor, source);
    };
    Result<nlohmann::json> at_limit = parse(128);
    ASSERT_TRUE(at_limit.ok()) << at_limit.status().ToString();
    const nlohmann::json* inner = &*at_limit;
    for (int i = 0; i < 128; ++i) {
      ASSERT_TRUE(inner->is_array() && inner->size() == 1u) << "level " << i;
      inner = &(*inner)[0];
    }
    EXPECT_TRUE(inner->is_null());
    for (const size_t levels : {size_t{129}, size_t{100000}}) {
      Result<nlohmann::json> deep = parse(levels);
      ASSERT_FALSE(deep.ok()) << levels;
      EXPECT_EQ(deep.status().message(),
                source + ": not valid " + (cbor ? "CBOR" : "JSON") +
                    ": nested deeper than 128 arrays and objects (a trace, plan or config " +
                    "needs fewer than 10)");
    }
  }
  // Objects count as levels too.
  std::string objects;
  for (int i = 0; i < 129; ++i) objects += "{\"a\":";
  objects += "1" + std::string(129, '}');
  EXPECT_FALSE(ParseJson(objects, false, "o.json").ok());
}

TEST(TraceIo, WriteToMissingDirectoryFailsAndLeavesNothing) {
  Status s = WriteTrace(testing::SmallTrace(), "/nonexistent-dir/x.json");
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(fs::exists("/nonexistent-dir"));
}

// The names in `dir` that start with `prefix`.
std::vector<std::string> NamesStartingWith(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0) names.push_back(name);
  }
  return names;
}

TEST(TraceIo, WriteOntoADirectoryNamesTheRenamesError) {
  // rename(2) of a file onto a non-empty directory fails with EISDIR; the
  // message is that error, not the result of removing the temporary file.
  TempDir dir;
  fs::create_directories(dir.File("out.json/inside"));
  Status s = WriteJsonFile(nlohmann::json{{"a", 1}}, dir.File("out.json"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("out.json: cannot move into place (Is a directory)"),
            std::string::npos)
      << s.ToString();
  EXPECT_TRUE(NamesStartingWith(fs::path(dir.File("")), "out.json.tmp").empty());
}

TEST(TraceIo, InvalidUtf8IsAnErrorNamingTheFileAndLeavesNoTemporaryFile) {
  // nlohmann's dump throws type_error 316 on a string that is not UTF-8.
  TempDir dir;
  const nlohmann::json j = {{"name", std::string("op\xff")}};
  Status s = Status::Ok();
  EXPECT_NO_THROW(s = WriteJsonFile(j, dir.File("bad.json")));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad.json: cannot serialize"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("invalid UTF-8"), std::string::npos) << s.ToString();
  EXPECT_TRUE(NamesStartingWith(fs::path(dir.File("")), "bad.json").empty());
}

}  // namespace
}  // namespace ssdtrain::traces
