#include <sys/stat.h>

#include <string>

#include "exec/offload_engine.h"

namespace ssdtrain::exec {

// NAME_MAX on Linux file systems.
constexpr size_t kMaxFileName = 255;

Status CheckOffloadFileName(std::string_view name, const std::string& dir) {
  std::string quoted(1, '\'');
  quoted.append(name);
  quoted.push_back('\'');
  auto refuse = [&](const std::string& why) {
    return Status::InvalidArgument("offload file name " + quoted + " " + why +
                                   "; expected a plain file name such as 't42.bin' that stays "
                                   "inside the offload directory");
  };
  if (name.empty()) return refuse("is empty");
  if (name.size() > kMaxFileName) return refuse("is longer than 255 bytes");
  if (name.front() == '/') return refuse("is an absolute path");
  if (name == "." || name == "..") return refuse("names a directory");
  if (name.find("..") != std::string_view::npos && name.find('/') != std::string_view::npos) {
    return refuse("climbs out with '..'");
  }
  if (name.find('/') != std::string_view::npos) return refuse("contains '/' (names are flat)");
  for (const char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
      return refuse("contains a control character");
    }
  }
  if (!dir.empty()) {
    struct stat st {};
    const std::string path = dir + "/" + std::string(name);
    if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      return refuse("is a symlink in " + dir + " (it could point anywhere)");
    }
  }
  return Status::Ok();
}

Status CheckPlanFileNames(const traces::Plan& plan, const std::string& source) {
  for (size_t i = 0; i < plan.placements.size(); ++i) {
    const traces::Placement& p = plan.placements[i];
    if (p.action != traces::TensorAction::kOffloadSsd) continue;
    const std::string where = source + ": placements[" + std::to_string(i) + "] (tensor " +
                              std::to_string(p.tensor) + ")";
    if (!p.file.empty()) {
      Status s = CheckOffloadFileName(p.file);
      if (!s.ok()) return s.WithPrefix(where + ".file");
    }
    if (p.offset < 0 || p.offset % kDirectIoAlign != 0) {
      return Status::InvalidArgument(where + ".offset: " + std::to_string(p.offset) +
                                     " is not a non-negative multiple of " +
                                     std::to_string(kDirectIoAlign));
    }
    if (p.device < 0) {
      return Status::InvalidArgument(where + ".device: " + std::to_string(p.device) +
                                     " is negative; expected an index into the --dir list");
    }
  }
  return Status::Ok();
}

}  // namespace ssdtrain::exec
