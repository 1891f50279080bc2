// The files one verb writes, each named by the flag that gave it: checked
// before the verb does any work (a search, a measurement, a replay), and
// written together at its end, so that a failure leaves none of them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "traces/status.h"

namespace ssdtrain::app {

class Outputs {
 public:
  // `path` given by `flag` ("-o", "--timeline"); an empty path is no output.
  void Add(const std::string& flag, const std::string& path);
  // Each path's folder exists and is writable, no path is a folder, and no
  // two flags name the same file. Makes nothing.
  [[nodiscard]] Status Check() const;
  // What Commit writes for `flag`'s path (nothing where its path is empty):
  // a JSON document (CBOR for a .cbor path, as traces::WriteJsonFile) or text.
  void Set(const std::string& flag, nlohmann::json doc);
  void SetText(const std::string& flag, std::string text);
  // Writes every document set, each to a temporary file beside its path,
  // then renames them into place; if one fails, removes the temporary files
  // (and any already renamed), so no output of this run is left.
  [[nodiscard]] Status Commit();

 private:
  struct File {
    std::string flag, path;
    bool set = false, text = false;
    nlohmann::json doc;
    std::string bytes;
  };
  File* Find(const std::string& flag);
  std::vector<File> files_;
};

}  // namespace ssdtrain::app
