// One cuBLASLt matmul with an epilogue (bias, GELU, GELU's gradient) on a stream: what
// ops<cuda>::gemm_fused runs. cuBLASLt's heuristic is asked once per shape, types,
// epilogue and pointer alignments (a host call of tens of microseconds: too dear for
// every GEMM of every step) and its answer kept, a refusal too (stderr says so once): the
// caller then runs the unfused steps, and the counts below say which way each call went.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>

#include "../../core/error.hpp"
#include "cublas_check.hpp"
#include "cuda_check.hpp"

namespace strata::detail {

// A matmul in cuBLAS's column-major terms: D = epilogue(op(A) op(B)), D in C's place
// (beta 0), fp32 accumulation and scale.
struct lt_matmul_call {
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  std::int64_t m = 0, n = 0, k = 0;
  cudaDataType_t ab_type = CUDA_R_32F, c_type = CUDA_R_32F;
  const void* a = nullptr;
  std::int64_t lda = 1;
  const void* b = nullptr;
  std::int64_t ldb = 1;
  void* c = nullptr;
  std::int64_t ldc = 1;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // [m]
  cudaDataType_t bias_type = CUDA_R_32F;
  const void* aux = nullptr;  // [m, n] at ldc: written by GELU_AUX_BIAS, read by DGELU
};

// No workspace: the fused GEMMs are the wide ones (tokens x features), where splitting
// the sums buys nothing, and a workspace would be device memory outside the plan.

// How many fused GEMMs ran, and how many calls were declined (no kernel for them, or
// fusing turned off) and left to the caller's unfused steps.
struct gemm_fused_counters {
  std::atomic<std::uint64_t> fused{0}, declined{0};
};
inline gemm_fused_counters& gemm_fused_counts() {
  static gemm_fused_counters c;
  return c;
}

// STRATA_GEMM_EPILOGUES=0 runs the unfused steps everywhere (to compare, or to rule the
// fused kernels out); unset or 1 fuses where cuBLASLt can. Tests switch it directly.
inline bool gemm_epilogues_from_env() {
  const char* v = std::getenv("STRATA_GEMM_EPILOGUES");
  const std::string_view s = v ? v : "";
  expects<config_error>(s.empty() || s == "0" || s == "1", [&] {
    return cat("STRATA_GEMM_EPILOGUES='", s, "': expected 0 (GEMMs and their epilogues one by one) or 1 (fused)");
  });
  return s != "0";
}
inline std::atomic<bool>& gemm_epilogues_enabled() {
  static std::atomic<bool> on{gemm_epilogues_from_env()};
  return on;
}

// The cuBLASLt handle of the current device, made once and kept for the process's life
// (destroying it at exit could follow the CUDA driver's own teardown).
inline cublasLtHandle_t lt_handle() {
  int device = 0;
  STRATA_CHECK_CUDA(cudaGetDevice(&device));
  static std::mutex mu;
  static std::map<int, cublasLtHandle_t> handles;
  const std::lock_guard lock(mu);
  cublasLtHandle_t& h = handles[device];
  if (!h) STRATA_CHECK_CUBLAS(cublasLtCreate(&h));
  return h;
}

// The descriptors of a call; status is the first failure while making them.
class lt_descriptors {
 public:
  explicit lt_descriptors(const lt_matmul_call& k) {
    set(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    attr(CUBLASLT_MATMUL_DESC_TRANSA, static_cast<std::int32_t>(k.op_a));
    attr(CUBLASLT_MATMUL_DESC_TRANSB, static_cast<std::int32_t>(k.op_b));
    attr(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<std::uint32_t>(k.epilogue));
    // The bias and the auxiliary matrix are of C's type unless told otherwise; a type is
    // set only where it differs (a setting cuBLASLt may refuse for some types).
    if (k.bias) {
      attr(CUBLASLT_MATMUL_DESC_BIAS_POINTER, k.bias);
      if (k.bias_type != k.c_type) attr(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<std::int32_t>(k.bias_type));
    }
    if (k.aux) {
      attr(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, k.aux);
      attr(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, k.ldc);
    }
    const bool ta = k.op_a != CUBLAS_OP_N, tb = k.op_b != CUBLAS_OP_N;
    layout(&a_, k.ab_type, ta ? k.k : k.m, ta ? k.m : k.k, k.lda);
    layout(&b_, k.ab_type, tb ? k.n : k.k, tb ? k.k : k.n, k.ldb);
    layout(&c_, k.c_type, k.m, k.n, k.ldc);
  }
  lt_descriptors(const lt_descriptors&) = delete;
  lt_descriptors& operator=(const lt_descriptors&) = delete;
  ~lt_descriptors() {
    for (cublasLtMatrixLayout_t l : {a_, b_, c_})
      if (l) (void)cublasLtMatrixLayoutDestroy(l);
    if (op_) (void)cublasLtMatmulDescDestroy(op_);
  }
  cublasStatus_t status() const noexcept { return status_; }
  cublasLtMatmulDesc_t op() const noexcept { return op_; }
  cublasLtMatrixLayout_t a() const noexcept { return a_; }
  cublasLtMatrixLayout_t b() const noexcept { return b_; }
  cublasLtMatrixLayout_t c() const noexcept { return c_; }

 private:
  void set(cublasStatus_t s) {
    if (status_ == CUBLAS_STATUS_SUCCESS) status_ = s;
  }
  template <class V>
  void attr(cublasLtMatmulDescAttributes_t a, const V& v) {
    if (op_) set(cublasLtMatmulDescSetAttribute(op_, a, &v, sizeof v));
  }
  void layout(cublasLtMatrixLayout_t* l, cudaDataType_t type, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
    if (status_ == CUBLAS_STATUS_SUCCESS)
      set(cublasLtMatrixLayoutCreate(l, type, static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(cols), ld));
  }
  cublasStatus_t status_ = CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
};

// What the heuristic chose for a kind of call, or that it had nothing.
struct lt_plan {
  bool usable = false;
  cublasLtMatmulAlgo_t algo{};
};

// Once per kind of call (the caller runs unfused from then on): which GEMM lost its fusion.
inline void say_declined(const lt_matmul_call& k, const char* why) {
  std::fprintf(stderr,
               "strata: cuBLASLt declined a fused GEMM (epilogue %u, m %lld, n %lld, k %lld, types %d/%d): %s; it "
               "runs unfused\n",
               static_cast<unsigned>(k.epilogue), static_cast<long long>(k.m), static_cast<long long>(k.n),
               static_cast<long long>(k.k), static_cast<int>(k.ab_type), static_cast<int>(k.c_type), why);
}

// The largest power of two that divides a pointer, up to 16 bytes: cuBLASLt's kernels
// depend on the operands' alignment, so it is part of what a plan is for. Capped at 16
// (what Hopper's TMA loads need, and what every param and activation has), so that a
// param's place in a flat buffer, which differs between ZeRO stages, cannot change the
// kernel and with it the bits.
inline std::int64_t lt_alignment(const void* p) {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  return v ? static_cast<std::int64_t>(std::min<std::uintptr_t>(v & (~v + 1), 16)) : 0;
}

class lt_plans {
 public:
  using key = std::array<std::int64_t, 18>;
  static key key_of(int device, const lt_matmul_call& k) {
    return {device,
            k.op_a,
            k.op_b,
            k.m,
            k.n,
            k.k,
            k.ab_type,
            k.c_type,
            k.lda,
            k.ldb,
            k.ldc,
            static_cast<std::int64_t>(k.epilogue),
            k.bias ? k.bias_type : -1,
            lt_alignment(k.a),
            lt_alignment(k.b),
            lt_alignment(k.c),
            lt_alignment(k.bias),
            lt_alignment(k.aux)};
  }
  // The plan for k (asked of the heuristic the first time).
  lt_plan get(const lt_matmul_call& k) {
    int device = 0;
    STRATA_CHECK_CUDA(cudaGetDevice(&device));
    const key id = key_of(device, k);
    const std::lock_guard lock(mu_);
    if (const auto it = plans_.find(id); it != plans_.end()) return it->second;
    return plans_[id] = ask(k);
  }
  // A call the plan's kernel refused after all: declined from now on.
  void decline(const lt_matmul_call& k, cublasStatus_t status) {
    int device = 0;
    STRATA_CHECK_CUDA(cudaGetDevice(&device));
    const std::lock_guard lock(mu_);
    plans_[key_of(device, k)] = lt_plan{};
    say_declined(k, cublasGetStatusName(status));
  }

 private:
  // The heuristic reads the bias and auxiliary pointers' alignment from their values: it
  // is shown stand-ins aligned exactly as the key says, so that its answer is the key's.
  static const void* stand_in(const void* p) {
    return p ? reinterpret_cast<const void*>((std::uintptr_t{1} << 20) | static_cast<std::uintptr_t>(lt_alignment(p)))
             : nullptr;
  }
  static lt_plan ask(const lt_matmul_call& call) {
    lt_matmul_call k = call;
    k.bias = stand_in(call.bias);
    k.aux = stand_in(call.aux);
    const lt_descriptors d(k);
    lt_plan plan;
    if (d.status() != CUBLAS_STATUS_SUCCESS) return plan;
    cublasLtMatmulPreference_t pref = nullptr;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return plan;
    const std::uint64_t workspace = 0;
    // Partial sums, if a kernel splits its sums at all, in fp32 only, never rounded to a
    // 16-bit output in between (cublas_math_mode's rule for the plain GEMMs).
    const std::uint32_t schemes =
        CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE |
        (k.c_type == CUDA_R_32F ? CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE : 0u);
    // The heuristic sees layouts, not pointers: it is told how the operands are aligned
    // (by default it assumes 256 bytes, which a param in a flat buffer may not be).
    const auto aligned = [](const void* p) { return static_cast<std::uint32_t>(lt_alignment(p)); };
    const std::uint32_t align_a = aligned(k.a), align_b = aligned(k.b), align_c = aligned(k.c);
    const auto pref_set = [&](cublasLtMatmulPreferenceAttributes_t a, const auto& v) {
      return cublasLtMatmulPreferenceSetAttribute(pref, a, &v, sizeof v) == CUBLAS_STATUS_SUCCESS;
    };
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (pref_set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace) &&
        pref_set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes) &&
        pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a) &&
        pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b) &&
        pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c) &&
        pref_set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c) &&
        cublasLtMatmulAlgoGetHeuristic(lt_handle(), d.op(), d.a(), d.b(), d.c(), d.c(), pref, 1, &result, &found) ==
            CUBLAS_STATUS_SUCCESS &&
        found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
      plan.usable = true;
      plan.algo = result.algo;
    }
    (void)cublasLtMatmulPreferenceDestroy(pref);
    if (!plan.usable) say_declined(call, "its heuristic has no kernel for it");
    return plan;
  }
  std::mutex mu_;
  std::map<key, lt_plan> plans_;
};
inline lt_plans& lt_plan_cache() {
  static lt_plans p;
  return p;
}

// Runs k on stream s and returns true, or returns false with nothing queued: fusing is
// off, or cuBLASLt has no kernel for k. Any other failure throws.
inline bool lt_matmul(const lt_matmul_call& k, cudaStream_t s) {
  auto& counts = gemm_fused_counts();
  if (!gemm_epilogues_enabled()) {
    ++counts.declined;
    return false;
  }
  const lt_plan plan = lt_plan_cache().get(k);
  if (!plan.usable) {
    ++counts.declined;
    return false;
  }
  const lt_descriptors d(k);
  STRATA_CHECK_CUBLAS(d.status());
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st = cublasLtMatmul(lt_handle(), d.op(), &alpha, k.a, d.a(), k.b, d.b(), &beta, k.c, d.c(), k.c,
                                           d.c(), &plan.algo, nullptr, 0, s);
  // cuBLASLt checks a call before it launches anything: a refusal here leaves C untouched.
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
    lt_plan_cache().decline(k, st);
    ++counts.declined;
    return false;
  }
  STRATA_CHECK_CUBLAS(st);
  ++counts.fused;
  return true;
}

}  // namespace strata::detail
