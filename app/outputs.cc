#include "app/outputs.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "traces/io.h"

namespace ssdtrain::app {
namespace {

namespace fs = std::filesystem;

fs::path FolderOf(const std::string& path) {
  const fs::path folder = fs::path(path).parent_path();
  return folder.empty() ? fs::path(".") : folder;
}

// Beside the target, keeping its name's end (traces::WriteJsonFile writes
// CBOR for a name ending in .cbor).
std::string TemporaryPath(const std::string& path) {
  const fs::path p(path);
  return (FolderOf(path) / (".partial-" + std::to_string(::getpid()) + "-" + p.filename().string()))
      .string();
}

Status WriteText(const std::string& text, const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::IoError(path + ": cannot create (" + std::strerror(errno) + ")");
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.flush();
  if (!out) return Status::IoError(path + ": write failed (" + std::strerror(errno) + ")");
  return Status::Ok();
}

}  // namespace

void Outputs::Add(const std::string& flag, const std::string& path) {
  File f;
  f.flag = flag;
  f.path = path;
  files_.push_back(std::move(f));
}

Outputs::File* Outputs::Find(const std::string& flag) {
  for (File& f : files_) {
    if (f.flag == flag) return &f;
  }
  return nullptr;
}

Status Outputs::Check() const {
  for (size_t i = 0; i < files_.size(); ++i) {
    const File& f = files_[i];
    if (f.path.empty()) continue;
    const std::string what = f.flag + " " + f.path;
    std::error_code ec;
    if (fs::is_directory(f.path, ec)) {
      return Status::InvalidArgument(what + ": is a folder; give a file name");
    }
    const fs::path folder = FolderOf(f.path);
    if (!fs::is_directory(folder, ec)) {
      return Status::NotFound(what + ": cannot be written: its folder " + folder.string() +
                              (fs::exists(folder, ec) ? " is not a folder" : " does not exist"));
    }
    if (::access(folder.c_str(), W_OK | X_OK) != 0) {
      return Status::IoError(what + ": cannot be written: its folder " + folder.string() +
                             " is not writable (" + std::strerror(errno) + ")");
    }
    for (size_t j = 0; j < i; ++j) {
      const File& g = files_[j];
      if (g.path.empty()) continue;
      std::error_code eg, ef;
      const fs::path a = fs::weakly_canonical(g.path, eg), b = fs::weakly_canonical(f.path, ef);
      if (!eg && !ef && a == b) {
        return Status::InvalidArgument(g.flag + " and " + f.flag + " name the same file, " +
                                       f.path + "; give each its own");
      }
    }
  }
  return Status::Ok();
}

void Outputs::Set(const std::string& flag, nlohmann::json doc) {
  File* f = Find(flag);
  if (f == nullptr) return;
  f->set = true;
  f->doc = std::move(doc);
}

void Outputs::SetText(const std::string& flag, std::string text) {
  File* f = Find(flag);
  if (f == nullptr) return;
  f->set = true;
  f->text = true;
  f->bytes = std::move(text);
}

Status Outputs::Commit() {
  std::vector<std::string> written;  // temporary files, in files_'s order
  std::vector<const File*> targets;
  auto remove_all = [](const std::vector<std::string>& paths) {
    for (const std::string& p : paths) {
      std::error_code ignored;
      fs::remove(p, ignored);
    }
  };
  for (const File& f : files_) {
    if (f.path.empty() || !f.set) continue;
    const std::string tmp = TemporaryPath(f.path);
    Status s = f.text ? WriteText(f.bytes, tmp) : traces::WriteJsonFile(f.doc, tmp);
    if (!s.ok()) {
      remove_all(written);
      std::error_code ignored;
      fs::remove(tmp, ignored);
      return Status::IoError(f.flag + " " + f.path + ": " + s.message());
    }
    written.push_back(tmp);
    targets.push_back(&f);
  }
  std::vector<std::string> placed;
  for (size_t i = 0; i < written.size(); ++i) {
    std::error_code ec;
    fs::rename(written[i], targets[i]->path, ec);
    if (ec) {
      remove_all(std::vector<std::string>(written.begin() + static_cast<long>(i), written.end()));
      remove_all(placed);
      return Status::IoError(targets[i]->flag + " " + targets[i]->path +
                             ": cannot move into place (" + ec.message() + ")");
    }
    placed.push_back(targets[i]->path);
  }
  return Status::Ok();
}

}  // namespace ssdtrain::app
