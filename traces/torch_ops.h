// PyTorch's vocabulary as ssdtrain reads it: which aten ops only make a view,
// the kind of each op, a matrix product's dims and an attention kernel's FLOPs
// from its arguments' shapes, and the trace dtype a torch dtype is stored as.
//
// Decided here, once, for both readers of PyTorch: ssdtrain.capture
// (python/ssdtrain/capture.py, through the _engine module) and the importer
// of PyTorch execution traces (traces/pytorch_et.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "traces/trace.h"

namespace ssdtrain::traces {

struct TorchOp {
  OpKind kind = OpKind::kElementwise;  // an op not listed is elementwise
  bool view = false;                   // only makes a view: no work, no new bytes
};

// `name` with or without its namespace and overload: "aten::addmm", "addmm",
// "aten::add.Tensor". Ops of other namespaces are elementwise, not views.
TorchOp TorchOpInfo(std::string_view name);

// Each argument's shape, in the op's schema order; a non-tensor argument's is
// empty (as PyTorch's execution traces write input_shapes).
using ArgShapes = std::vector<std::vector<int64_t>>;

// A matrix product's (m, n, k, batch): mm, addmm, bmm, baddbmm, linear
// (m is every leading dim of the input), matmul (with its broadcast batch).
// nullopt for any other op, or shapes that do not fit it, or a dim that is
// not positive (an empty product does no work).
std::optional<GemmDims> TorchGemmDims(std::string_view name, const ArgShapes& args);

// An attention kernel's FLOPs (scaled_dot_product_attention and its flash,
// efficient and cudnn forms): 2·Lq·Lk·(E + Ev) per batch and head, the two
// products, from the query, key and value shapes (..., L, E); the backward
// forms 2.5 times that (five products to the forward's two). A causal mask is
// not seen from shapes: the full count. nullopt for any other op or shapes
// that do not fit.
std::optional<int64_t> TorchAttentionFlops(std::string_view name, const ArgShapes& args);

// The trace dtype a torch dtype is stored as: by torch's name ("float32",
// "torch.bfloat16") or the C++ type name execution traces write ("float",
// "c10::BFloat16", "long int"). Types without one of their own are stored as
// the trace dtype of their size (float64 as int64, int16 as fp16, bool, int8
// and the float8 types as uint8: a trace's fp8 rows carry a recipe's scales,
// which torch's float8 tensors do not). nullopt: none (complex, ...).
std::optional<DType> TorchDType(std::string_view name);
// The names TorchDType knows, for messages.
std::string TorchDTypeNames();
// The C++ type name PyTorch's execution traces write for a trace dtype's
// torch dtype ("float" for fp32, "c10::BFloat16", "c10::Float8_e4m3fn" for fp8).
std::string_view TorchTypeName(DType dtype);

}  // namespace ssdtrain::traces
