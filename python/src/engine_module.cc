// ssdtrain._engine: the offload engine (exec/offload_engine.h) for Python.
//
// A thin layer: Python hands over raw addresses and byte counts (a tensor's
// data_ptr and nbytes) and keeps the tensor alive until Wait returns; this
// module turns Status into exceptions (OffloadError, carrying the engine's
// message, which names the tensor id and the file) and releases the GIL around
// every call that may block. Fault injection (exec/fault_backend.h) is exposed
// for tests: `faults=[("write"|"read", nth, "eio"|"enospc"|"eagain"|"short",
// count), ...]` wraps the chosen backend.
//
// Lifetime: Close() (or the object's destruction) waits for in-flight I/O and
// removes every file and the run directories; every later call raises.
//
// resolve_plan(trace, plan) reads a trace and a plan, checks the plan against
// the trace (traces::ValidatePlan: model, fingerprint, placements) and returns
// traces::ResolvePlan's storages that some tensor is saved on, so that
// ssdtrain.offload(plan=...) places storages by the plan's one meaning
// (traces/storage_plan.h). Any failure raises PlanError with the message that
// names the file and the field.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "exec/fault_backend.h"
#include "exec/io_backend.h"
#include "exec/offload_engine.h"
#include "traces/io.h"
#include "traces/plan.h"
#include "traces/storage_plan.h"
#include "traces/torch_ops.h"
#include "traces/trace.h"

namespace py = pybind11;

namespace ssdtrain::python {
namespace {

// (direction, nth request, kind, count): one exec::FaultRule.
using FaultSpec = std::tuple<std::string, int64_t, std::string, int64_t>;

// Set at module init: the Python exception types every engine failure and every
// plan failure raise.
PyObject* g_offload_error = nullptr;
PyObject* g_plan_error = nullptr;

[[noreturn]] void Raise(const Status& status) {
  PyErr_SetString(g_offload_error, status.ToString().c_str());
  throw py::error_already_set();
}

void Check(const Status& status) {
  if (!status.ok()) Raise(status);
}

exec::FaultRule ParseFault(const FaultSpec& spec) {
  const auto& [op, nth, kind, count] = spec;
  exec::FaultRule rule;
  if (op == "write") {
    rule.op = exec::IoOp::kWrite;
  } else if (op == "read") {
    rule.op = exec::IoOp::kRead;
  } else {
    throw py::value_error("faults: direction '" + op + "': expected 'write' or 'read'");
  }
  if (kind == "eio") {
    rule.kind = exec::FaultKind::kEio;
  } else if (kind == "enospc") {
    rule.kind = exec::FaultKind::kEnospc;
  } else if (kind == "eagain") {
    rule.kind = exec::FaultKind::kEagain;
  } else if (kind == "short") {
    rule.kind = exec::FaultKind::kShort;
  } else {
    throw py::value_error("faults: kind '" + kind + "': expected eio, enospc, eagain or short");
  }
  if (nth < 0 || count < 1) throw py::value_error("faults: nth must be >= 0 and count >= 1");
  rule.nth = nth;
  rule.count = count;
  return rule;
}

[[noreturn]] void RaisePlan(const Status& status) {
  PyErr_SetString(g_plan_error, status.ToString().c_str());
  throw py::error_already_set();
}

py::object OpOrNone(traces::OpId op) {
  return op == traces::kNoOp ? py::object(py::none()) : py::object(py::int_(op));
}

// One dict per saved storage (in root-id order): root, name, bytes, dtype,
// shape (the root row's), action, prefetch_before, evict_before, producer and
// first_backward_use, last_use (op ids or None); plus the plan's model, policy, fingerprint and
// ssd_bytes, and backward_start (the trace's first backward op, or None).
py::dict ResolvePlanFiles(const std::string& trace_path, const std::string& plan_path) {
  Result<traces::Trace> trace = Status::Internal("not read");
  Result<traces::Plan> plan = Status::Internal("not read");
  Result<traces::StoragePlan> resolved = Status::Internal("not resolved");
  {
    py::gil_scoped_release release;
    trace = traces::ReadTrace(trace_path);
    if (trace.ok()) plan = traces::ReadPlan(plan_path);
    if (trace.ok() && plan.ok()) {
      const Status valid = traces::ValidatePlan(*plan, *trace, plan_path);
      resolved = valid.ok() ? traces::ResolvePlan(*trace, *plan, plan_path)
                            : Result<traces::StoragePlan>(valid);
    }
  }
  if (!trace.ok()) RaisePlan(trace.status());
  if (!plan.ok()) RaisePlan(plan.status());
  if (!resolved.ok()) RaisePlan(resolved.status());
  py::list storages;
  for (const traces::StorageInfo& s : resolved->storages) {
    if (!s.saved) continue;
    const traces::Tensor& root = trace->tensor(s.root);
    py::dict d;
    d["root"] = s.root;
    d["name"] = root.name;
    d["bytes"] = s.bytes;
    d["dtype"] = std::string(traces::ToString(root.dtype));
    d["shape"] = root.shape;
    d["action"] = std::string(traces::ToString(s.action));
    d["placed_by"] = s.placed_by;
    d["prefetch_before"] = OpOrNone(s.prefetch_before);
    d["evict_before"] = OpOrNone(s.evict_before);
    d["producer"] = OpOrNone(s.producer);
    d["first_backward_use"] = OpOrNone(s.first_backward_use);
    d["last_use"] = OpOrNone(s.last_use);
    storages.append(std::move(d));
  }
  traces::OpId backward_start = traces::kNoOp;
  for (const traces::Op& op : trace->ops) {
    if (op.phase == traces::Phase::kBackward) {
      backward_start = op.id;
      break;
    }
  }
  py::dict out;
  out["backward_start"] = OpOrNone(backward_start);
  out["model"] = plan->model;
  out["policy"] = plan->policy;
  out["trace_fingerprint"] = traces::FingerprintHex(plan->trace_fingerprint);
  out["ssd_bytes"] = resolved->ssd_bytes;
  out["storages"] = std::move(storages);
  return out;
}

class PyEngine {
 public:
  PyEngine(std::vector<std::string> dirs, const std::string& backend, int64_t block_size,
           int queue_depth, int64_t staging_bytes, bool direct_io, bool allow_buffered_io,
           const std::vector<FaultSpec>& faults) {
    Result<exec::BackendKind> kind = exec::ParseBackendKind(backend);
    if (!kind.ok()) Raise(kind.status());
    exec::OffloadOptions options;
    options.dirs = std::move(dirs);
    options.backend = *kind;
    options.block_size = block_size;
    options.queue_depth = queue_depth;
    options.staging_bytes = staging_bytes;
    options.direct_io = direct_io;
    options.allow_buffered_io = allow_buffered_io;
    Result<std::unique_ptr<exec::OffloadEngine>> engine = Status::Internal("not created");
    if (faults.empty()) {
      py::gil_scoped_release release;
      engine = exec::OffloadEngine::Create(std::move(options));
    } else {
      exec::FaultOptions fault_options;
      for (const FaultSpec& f : faults) fault_options.rules.push_back(ParseFault(f));
      py::gil_scoped_release release;
      Result<std::unique_ptr<exec::IoBackend>> inner =
          exec::MakeIoBackend(options.backend, options.queue_depth, options.warn);
      if (inner.ok()) {
        auto fault = std::make_unique<exec::FaultBackend>(std::move(inner).value(),
                                                          std::move(fault_options));
        fault_ = fault.get();
        engine = exec::OffloadEngine::Create(std::move(options), std::move(fault));
      } else {
        engine = inner.status();
      }
    }
    if (!engine.ok()) Raise(engine.status());
    engine_ = std::move(engine).value();
  }

  uint64_t WriteAsync(int64_t tensor, uintptr_t address, int64_t bytes) {
    exec::OffloadEngine& e = Live();
    Result<exec::Ticket> ticket = Status::Internal("not issued");
    {
      py::gil_scoped_release release;
      ticket = e.WriteAsync(Key(tensor), reinterpret_cast<const void*>(address), bytes);
    }
    if (!ticket.ok()) Raise(ticket.status());
    return ticket->id;
  }

  uint64_t ReadAsync(int64_t tensor, uintptr_t address, int64_t bytes) {
    exec::OffloadEngine& e = Live();
    Result<exec::Ticket> ticket = Status::Internal("not issued");
    {
      py::gil_scoped_release release;
      ticket = e.ReadAsync(Key(tensor), reinterpret_cast<void*>(address), bytes);
    }
    if (!ticket.ok()) Raise(ticket.status());
    return ticket->id;
  }

  void Wait(uint64_t ticket) {
    exec::OffloadEngine& e = Live();
    Status s;
    {
      py::gil_scoped_release release;
      s = e.Wait(exec::Ticket{ticket});
    }
    Check(s);
  }

  bool Done(uint64_t ticket) { return Live().Done(exec::Ticket{ticket}); }

  void Remove(int64_t tensor) {
    exec::OffloadEngine& e = Live();
    Status s;
    {
      py::gil_scoped_release release;
      s = e.Remove(tensor);
    }
    Check(s);
  }

  std::string FilePath(int64_t tensor) {
    Result<std::string> path = Live().FilePath(tensor);
    if (!path.ok()) Raise(path.status());
    return *path;
  }

  py::dict Stats() {
    const exec::OffloadStats s = Live().Stats();
    py::dict d;
    d["bytes_written"] = s.bytes_written;
    d["bytes_read"] = s.bytes_read;
    d["write_busy_ns"] = s.write_busy_ns;
    d["read_busy_ns"] = s.read_busy_ns;
    d["requests"] = s.requests;
    d["eagain_resubmits"] = s.eagain_resubmits;
    d["short_continuations"] = s.short_continuations;
    d["bounce_copies"] = s.bounce_copies;
    return d;
  }

  std::vector<std::string> RunDirs() { return Live().run_dirs(); }
  std::string BackendName() { return Live().BackendName(); }
  bool DirectIo() { return Live().direct_io(); }
  int64_t FaultsInjected() const { return fault_ == nullptr ? 0 : fault_->injected(); }
  bool closed() const { return engine_ == nullptr; }

  // Waits for in-flight I/O, removes every file and the run directories.
  void Close() {
    std::unique_ptr<exec::OffloadEngine> engine = std::move(engine_);
    fault_ = nullptr;
    py::gil_scoped_release release;
    engine.reset();
  }

 private:
  static exec::TensorKey Key(int64_t tensor) {
    exec::TensorKey key;
    key.tensor = tensor;
    return key;
  }
  exec::OffloadEngine& Live() {
    if (engine_ == nullptr) {
      PyErr_SetString(g_offload_error, "the offload engine is closed");
      throw py::error_already_set();
    }
    return *engine_;
  }

  std::unique_ptr<exec::OffloadEngine> engine_;
  exec::FaultBackend* fault_ = nullptr;  // owned by engine_, when faults were given
};

// PyTorch's vocabulary (traces/torch_ops.h), for ssdtrain.capture.
std::pair<std::string, bool> TorchOpInfo(const std::string& name) {
  const traces::TorchOp op = traces::TorchOpInfo(name);
  return {std::string(traces::ToString(op.kind)), op.view};
}

std::optional<std::tuple<int64_t, int64_t, int64_t, int64_t>> TorchGemmDims(
    const std::string& name, const traces::ArgShapes& args) {
  const std::optional<traces::GemmDims> d = traces::TorchGemmDims(name, args);
  if (!d) return std::nullopt;
  return std::tuple{d->m, d->n, d->k, d->batch};
}

std::optional<std::string> TorchDType(const std::string& name) {
  const std::optional<traces::DType> d = traces::TorchDType(name);
  if (!d) return std::nullopt;
  return std::string(traces::ToString(*d));
}

}  // namespace
}  // namespace ssdtrain::python

PYBIND11_MODULE(_engine, m) {
  using ssdtrain::python::PyEngine;
  m.doc() = "ssdtrain's offload engine (io_uring, O_DIRECT, CRC32C per extent)";
  static py::exception<std::runtime_error> offload_error(m, "OffloadError", PyExc_RuntimeError);
  ssdtrain::python::g_offload_error = offload_error.ptr();
  static py::exception<std::invalid_argument> plan_error(m, "PlanError", PyExc_ValueError);
  ssdtrain::python::g_plan_error = plan_error.ptr();
  m.def("resolve_plan", &ssdtrain::python::ResolvePlanFiles, py::arg("trace"), py::arg("plan"),
        "Checks a plan against its trace and returns its saved storages' placements");
  m.attr("DIRECT_IO_ALIGN") = ssdtrain::exec::kDirectIoAlign;
  m.def("torch_op", &ssdtrain::python::TorchOpInfo, py::arg("name"),
        "(kind, is_view) of an aten op by name (traces/torch_ops.h)");
  m.def("torch_gemm_dims", &ssdtrain::python::TorchGemmDims, py::arg("name"), py::arg("shapes"),
        "(m, n, k, batch) of a matrix product from its arguments' shapes, or None");
  m.def(
      "torch_attention_flops",
      [](const std::string& name, const ssdtrain::traces::ArgShapes& args) {
        return ssdtrain::traces::TorchAttentionFlops(name, args);
      },
      py::arg("name"), py::arg("shapes"), "An attention kernel's FLOPs, or None");
  m.def("torch_dtype", &ssdtrain::python::TorchDType, py::arg("name"),
        "The trace dtype a torch dtype is stored as (\"float32\" -> \"fp32\"), or None");
  m.def("torch_dtype_names", &ssdtrain::traces::TorchDTypeNames);
  py::class_<PyEngine>(m, "Engine")
      .def(py::init<std::vector<std::string>, const std::string&, int64_t, int, int64_t, bool, bool,
                    const std::vector<ssdtrain::python::FaultSpec>&>(),
           py::arg("dirs"), py::arg("backend") = "auto",
           py::arg("block_size") = ssdtrain::exec::kDefaultBlockSize,
           py::arg("queue_depth") = ssdtrain::exec::kDefaultQueueDepth,
           py::arg("staging_bytes") = int64_t{0}, py::arg("direct_io") = true,
           py::arg("allow_buffered_io") = false,
           py::arg("faults") = std::vector<ssdtrain::python::FaultSpec>{})
      .def("write_async", &PyEngine::WriteAsync, py::arg("tensor"), py::arg("address"),
           py::arg("nbytes"), "Starts writing nbytes at address as tensor; returns a ticket")
      .def("read_async", &PyEngine::ReadAsync, py::arg("tensor"), py::arg("address"),
           py::arg("nbytes"), "Starts reading tensor into address; returns a ticket")
      .def("wait", &PyEngine::Wait, py::arg("ticket"),
           "Blocks until the ticket's I/O is over; raises OffloadError on failure")
      .def("done", &PyEngine::Done, py::arg("ticket"))
      .def("remove", &PyEngine::Remove, py::arg("tensor"))
      .def("file_path", &PyEngine::FilePath, py::arg("tensor"))
      .def("stats", &PyEngine::Stats)
      .def("run_dirs", &PyEngine::RunDirs)
      .def("backend_name", &PyEngine::BackendName)
      .def("direct_io", &PyEngine::DirectIo)
      .def("faults_injected", &PyEngine::FaultsInjected)
      .def_property_readonly("closed", &PyEngine::closed)
      .def("close", &PyEngine::Close);
}
