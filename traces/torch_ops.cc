// PyTorch's vocabulary (traces/torch_ops.h).
#include "traces/torch_ops.h"

#include <algorithm>
#include <array>
#include <utility>

namespace ssdtrain::traces {
namespace {

// "aten::add.Tensor" -> "add"; ops of another namespace keep it ("myns::op").
std::string_view AtenName(std::string_view name) {
  if (name.starts_with("aten::")) name.remove_prefix(6);
  const size_t dot = name.find('.');
  if (dot != std::string_view::npos) name = name.substr(0, dot);
  return name;
}

constexpr std::array<std::string_view, 27> kViewOps = {
    "view",       "_unsafe_view", "t",         "transpose",
    "permute",    "expand",       "split",     "split_with_sizes",
    "slice",      "select",       "unsqueeze", "squeeze",
    "as_strided", "alias",        "detach",    "unbind",
    "chunk",      "narrow",       "view_as",   "_reshape_alias",
    "reshape",    "unfold",       "diagonal",  "lift_fresh",
    "numpy_T",    "expand_as",    "flatten",
};

constexpr std::array<std::pair<std::string_view, OpKind>, 36> kKinds = {{
    {"mm", OpKind::kGemm},
    {"addmm", OpKind::kGemm},
    {"bmm", OpKind::kGemm},
    {"baddbmm", OpKind::kGemm},
    {"linear", OpKind::kGemm},
    {"matmul", OpKind::kGemm},
    {"_softmax", OpKind::kSoftmax},
    {"softmax", OpKind::kSoftmax},
    {"_log_softmax", OpKind::kSoftmax},
    {"log_softmax", OpKind::kSoftmax},
    {"_softmax_backward_data", OpKind::kSoftmax},
    {"_log_softmax_backward_data", OpKind::kSoftmax},
    {"native_layer_norm", OpKind::kNorm},
    {"native_layer_norm_backward", OpKind::kNorm},
    {"layer_norm", OpKind::kNorm},
    {"rms_norm", OpKind::kNorm},
    {"_fused_rms_norm", OpKind::kNorm},
    {"embedding", OpKind::kEmbedding},
    {"embedding_dense_backward", OpKind::kEmbedding},
    {"nll_loss_forward", OpKind::kLoss},
    {"nll_loss_backward", OpKind::kLoss},
    {"nll_loss", OpKind::kLoss},
    {"nll_loss_nd", OpKind::kLoss},
    {"nll_loss2d_forward", OpKind::kLoss},
    {"nll_loss2d_backward", OpKind::kLoss},
    {"cross_entropy_loss", OpKind::kLoss},
    {"native_dropout", OpKind::kDropout},
    {"native_dropout_backward", OpKind::kDropout},
    {"dropout", OpKind::kDropout},
    {"scaled_dot_product_attention", OpKind::kAttention},
    {"_scaled_dot_product_flash_attention", OpKind::kAttention},
    {"_scaled_dot_product_efficient_attention", OpKind::kAttention},
    {"_scaled_dot_product_cudnn_attention", OpKind::kAttention},
    {"_scaled_dot_product_flash_attention_backward", OpKind::kAttention},
    {"_scaled_dot_product_efficient_attention_backward", OpKind::kAttention},
    {"_scaled_dot_product_cudnn_attention_backward", OpKind::kAttention},
}};

bool IsAten(std::string_view name) {
  return name.starts_with("aten::") || name.find("::") == std::string_view::npos;
}

const std::vector<int64_t>* Arg(const ArgShapes& args, size_t i) {
  return i < args.size() ? &args[i] : nullptr;
}

std::optional<GemmDims> Dims(int64_t m, int64_t n, int64_t k, int64_t batch) {
  if (m <= 0 || n <= 0 || k <= 0 || batch <= 0) return std::nullopt;
  return GemmDims{m, n, k, batch};
}

// a @ b for 2-D a (m, k) and b (k, n).
std::optional<GemmDims> Mm(const std::vector<int64_t>* a, const std::vector<int64_t>* b) {
  if (a == nullptr || b == nullptr || a->size() != 2 || b->size() != 2 || (*a)[1] != (*b)[0]) {
    return std::nullopt;
  }
  return Dims((*a)[0], (*b)[1], (*a)[1], 1);
}

// a @ b for 3-D a (batch, m, k) and b (batch, k, n).
std::optional<GemmDims> Bmm(const std::vector<int64_t>* a, const std::vector<int64_t>* b) {
  if (a == nullptr || b == nullptr || a->size() != 3 || b->size() != 3 || (*a)[0] != (*b)[0] ||
      (*a)[2] != (*b)[1]) {
    return std::nullopt;
  }
  return Dims((*a)[1], (*b)[2], (*a)[2], (*a)[0]);
}

int64_t Product(const std::vector<int64_t>& v, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= v[i];
  return p;
}

// torch.matmul's rules: 1-D operands gain and lose a dim, leading dims broadcast.
std::optional<GemmDims> Matmul(const std::vector<int64_t>* a, const std::vector<int64_t>* b) {
  if (a == nullptr || b == nullptr || a->empty() || b->empty()) return std::nullopt;
  const int64_t m = a->size() == 1 ? 1 : (*a)[a->size() - 2];
  const int64_t k = a->back();
  const int64_t kb = b->size() == 1 ? (*b)[0] : (*b)[b->size() - 2];
  const int64_t n = b->size() == 1 ? 1 : b->back();
  if (k != kb) return std::nullopt;
  const size_t a_lead = a->size() > 2 ? a->size() - 2 : 0;
  const size_t b_lead = b->size() > 2 ? b->size() - 2 : 0;
  const size_t lead = std::max(a_lead, b_lead);
  int64_t batch = 1;
  for (size_t i = 0; i < lead; ++i) {  // right-aligned broadcast of the leading dims
    const int64_t da = i < lead - a_lead ? 1 : (*a)[i - (lead - a_lead)];
    const int64_t db = i < lead - b_lead ? 1 : (*b)[i - (lead - b_lead)];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    batch *= std::max(da, db);
  }
  return Dims(m, n, k, batch);
}

// F.linear(input (..., k), weight (n, k)): m is every leading dim of the input.
std::optional<GemmDims> Linear(const std::vector<int64_t>* in, const std::vector<int64_t>* w) {
  if (in == nullptr || w == nullptr || in->empty() || w->size() != 2 || in->back() != (*w)[1]) {
    return std::nullopt;
  }
  return Dims(Product(*in, 0, in->size() - 1), (*w)[0], in->back(), 1);
}

// The forward's two products over query (..., Lq, E), key (..., Lk, E) and
// value (..., Lk, Ev), batch and heads being the query's leading dims.
std::optional<int64_t> AttentionForward(const ArgShapes& args, size_t q_at) {
  const std::vector<int64_t>* q = Arg(args, q_at);
  const std::vector<int64_t>* k = Arg(args, q_at + 1);
  const std::vector<int64_t>* v = Arg(args, q_at + 2);
  if (q == nullptr || k == nullptr || v == nullptr || q->size() < 2 || k->size() < 2 ||
      v->size() < 2 || q->back() != k->back() || (*k)[k->size() - 2] != (*v)[v->size() - 2]) {
    return std::nullopt;
  }
  const int64_t lq = (*q)[q->size() - 2], e = q->back();
  const int64_t lk = (*k)[k->size() - 2], ev = v->back();
  const int64_t batch = Product(*q, 0, q->size() - 2);
  if (lq <= 0 || lk <= 0 || e <= 0 || ev <= 0 || batch <= 0) return std::nullopt;
  return 2 * batch * lq * lk * (e + ev);
}

struct DTypeName {
  std::string_view torch;  // torch's name, after "torch."
  std::string_view cpp;    // the C++ type name execution traces write
  DType dtype;
};
constexpr std::array<DTypeName, 14> kDTypes = {{
    {"float16", "c10::Half", DType::kFp16},
    {"bfloat16", "c10::BFloat16", DType::kBf16},
    {"float32", "float", DType::kFp32},
    {"uint8", "unsigned char", DType::kUint8},
    {"bool", "bool", DType::kUint8},
    {"int8", "signed char", DType::kUint8},
    {"int32", "int", DType::kInt32},
    {"int64", "long int", DType::kInt64},
    {"float64", "double", DType::kInt64},
    {"int16", "short int", DType::kFp16},
    {"float8_e4m3fn", "c10::Float8_e4m3fn", DType::kUint8},
    {"float8_e5m2", "c10::Float8_e5m2", DType::kUint8},
    {"float8_e4m3fnuz", "c10::Float8_e4m3fnuz", DType::kUint8},
    {"float8_e5m2fnuz", "c10::Float8_e5m2fnuz", DType::kUint8},
}};

}  // namespace

TorchOp TorchOpInfo(std::string_view name) {
  if (!IsAten(name)) return {};
  const std::string_view op = AtenName(name);
  TorchOp info;
  info.view = std::find(kViewOps.begin(), kViewOps.end(), op) != kViewOps.end();
  for (const auto& [n, kind] : kKinds) {
    if (n == op) info.kind = kind;
  }
  return info;
}

std::optional<GemmDims> TorchGemmDims(std::string_view name, const ArgShapes& args) {
  if (!IsAten(name)) return std::nullopt;
  const std::string_view op = AtenName(name);
  if (op == "mm") return Mm(Arg(args, 0), Arg(args, 1));
  if (op == "addmm") return Mm(Arg(args, 1), Arg(args, 2));
  if (op == "bmm") return Bmm(Arg(args, 0), Arg(args, 1));
  if (op == "baddbmm") return Bmm(Arg(args, 1), Arg(args, 2));
  if (op == "linear") return Linear(Arg(args, 0), Arg(args, 1));
  if (op == "matmul") return Matmul(Arg(args, 0), Arg(args, 1));
  return std::nullopt;
}

std::optional<int64_t> TorchAttentionFlops(std::string_view name, const ArgShapes& args) {
  if (!IsAten(name)) return std::nullopt;
  const std::string_view op = AtenName(name);
  if (op == "scaled_dot_product_attention" || op == "_scaled_dot_product_flash_attention" ||
      op == "_scaled_dot_product_efficient_attention" ||
      op == "_scaled_dot_product_cudnn_attention") {
    return AttentionForward(args, 0);
  }
  if (op == "_scaled_dot_product_flash_attention_backward" ||
      op == "_scaled_dot_product_efficient_attention_backward" ||
      op == "_scaled_dot_product_cudnn_attention_backward") {
    // (grad_out, query, key, value, ...): five products to the forward's two.
    const std::optional<int64_t> f = AttentionForward(args, 1);
    if (!f) return std::nullopt;
    return *f / 2 * 5;
  }
  return std::nullopt;
}

std::optional<DType> TorchDType(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  for (const DTypeName& d : kDTypes) {
    if (name == d.torch || name == d.cpp) return d.dtype;
  }
  return std::nullopt;
}

std::string_view TorchTypeName(DType dtype) {
  if (dtype == DType::kFp8) return "c10::Float8_e4m3fn";
  for (const DTypeName& d : kDTypes) {
    if (d.dtype == dtype) return d.cpp;  // the first row of each dtype is its own
  }
  return "float";
}

std::string TorchDTypeNames() {
  std::string out;
  for (const DTypeName& d : kDTypes) {
    if (!out.empty()) out.append(", ");
    out.append(d.torch);
    out.append(" (");
    out.append(d.cpp);
    out.push_back(')');
  }
  return out;
}

}  // namespace ssdtrain::traces
