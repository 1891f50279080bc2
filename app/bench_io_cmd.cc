// ssdtrain bench-io: the offload engine's sequential write then read bandwidth
// on a directory, the measurement fio makes with --direct=1 --ioengine=io_uring.
#include <fmt/format.h>

#include <cctype>
#include <iostream>
#include <limits>
#include <memory>
#include <string>

#include "app/cli_errors.h"
#include "app/command.h"
#include "exec/bench_io.h"
#include "exec/offload_dir.h"

namespace ssdtrain::app {
namespace {

struct BenchIoFlags {
  std::string dir;
  std::string block_size = "4MiB";
  int queue_depth = 32;
  std::string size = "1GiB";
  std::string backend = "auto";
  bool buffered = false;
  bool allow_buffered_io = false;
};

// "4096", "4k", "4KiB", "4M", "1G", "1GiB" (binary multiples, as fio reads them).
Result<int64_t> ParseBytes(const std::string& flag, const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  std::string unit = text.substr(pos);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int shift = -1;
  if (unit.empty() || unit == "b") shift = 0;
  if (unit == "k" || unit == "kib" || unit == "kb") shift = 10;
  if (unit == "m" || unit == "mib" || unit == "mb") shift = 20;
  if (unit == "g" || unit == "gib" || unit == "gb") shift = 30;
  if (pos == 0 || pos > 12 || shift < 0) {
    return Status::InvalidArgument(flag + ": '" + text +
                                   "' is not a size; expected e.g. 4096, 64k, 4M or 1G");
  }
  const int64_t count = std::stoll(text.substr(0, pos));
  if (count > (std::numeric_limits<int64_t>::max() >> shift)) {
    return Status::InvalidArgument(flag + ": '" + text + "' is more bytes than fit in 64 bits");
  }
  const int64_t bytes = count << shift;
  if (bytes < 1) return Status::InvalidArgument(flag + ": must be >= 1 byte, got " + text);
  return bytes;
}

int Run(const BenchIoFlags& f) {
  exec::BenchIoOptions o;
  o.dir = f.dir;
  o.queue_depth = f.queue_depth;
  o.direct_io = !f.buffered;
  o.allow_buffered_io = f.allow_buffered_io;
  auto bs = ParseBytes("--block-size", f.block_size);
  if (!bs.ok()) return ReportError("bench-io", bs.status());
  auto size = ParseBytes("--size", f.size);
  if (!size.ok()) return ReportError("bench-io", size.status());
  auto backend = exec::ParseBackendKind(f.backend);
  if (!backend.ok()) return ReportError("bench-io", backend.status().WithPrefix("--backend"));
  if (Status dir = exec::CheckOffloadDir(f.dir, f.allow_buffered_io); !dir.ok()) {
    return ReportError("bench-io", dir);
  }
  o.block_size = *bs;
  o.size = *size;
  o.backend = *backend;
  auto r = exec::RunBenchIo(o);
  if (!r.ok()) return ReportError("bench-io", r.status());
  std::cout << fmt::format("bench-io: dir={} bs={} qd={} size={} backend={} direct={}\n", f.dir,
                           o.block_size, o.queue_depth, o.size, r->backend, r->direct_io ? 1 : 0);
  std::cout << fmt::format("write: {:.3f} GB/s ({} bytes in {:.3f} s)\n", r->write_GBps(), r->bytes,
                           static_cast<double>(r->write_ns) / 1e9);
  std::cout << fmt::format("read: {:.3f} GB/s ({} bytes in {:.3f} s)\n", r->read_GBps(), r->bytes,
                           static_cast<double>(r->read_ns) / 1e9);
  if (!r->direct_io) {
    std::cout << "buffered I/O: these figures are the page cache's, not the drive's\n";
  }
  return 0;
}

}  // namespace

Verb AddBenchIoCommand(CLI::App& app) {
  auto f = std::make_shared<BenchIoFlags>();
  CLI::App* cmd = app.add_subcommand(
      "bench-io", "Sequential write then read bandwidth of the offload engine on a directory");
  cmd->add_option("--dir", f->dir, "Directory on the SSD to test (a file is made and removed)")
      ->required();
  cmd->add_option("--block-size", f->block_size, "Bytes per request, e.g. 4M (default 4MiB)");
  cmd->add_option("--queue-depth", f->queue_depth, "Requests in flight (default 32)")
      ->check(IntAtLeast(1));
  cmd->add_option("--size", f->size, "Bytes written then read, e.g. 1G (default 1GiB)");
  cmd->add_option("--backend", f->backend, "auto, io_uring or posix (default auto)");
  cmd->add_flag("--buffered", f->buffered, "Do not use O_DIRECT");
  cmd->add_flag(
      "--allow-buffered-io", f->allow_buffered_io,
      "Where the directory is in memory (tmpfs, ramfs) or refuses O_DIRECT, measure through the "
      "page cache instead of failing");
  return Verb{cmd, [f] { return Run(*f); }};
}

}  // namespace ssdtrain::app
