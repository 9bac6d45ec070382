// Causal attention on a GPU through cuDNN's fused scaled-dot-product attention (the
// flash-attention algorithm on tensor cores: nothing [S, S] is kept), for 16-bit
// activations: forward writes the output and each row's log-sum-exp, backward reads them
// back and writes dq, dk and dv. Backward asks cuDNN for its deterministic algorithm (a
// fixed-order dQ reduction), so a run's bits repeat, as every strata result does; its
// workspace grows as B·H·S², so it runs over chunks of batch rows and heads whose
// workspace fits a limit (attention_workspace.hpp).
//
// cuDNN is loaded at run time (the cudnn-frontend's dynamic loading: a build needs its
// headers, not its library): STRATA_CUDNN_LIBRARY names the library (a path), else
// libcudnn.so.9 is looked up as dlopen does. Where it cannot be loaded, or refuses a shape
// (head sizes above 256 or not a multiple of 8, say), attention_core.hpp runs the unfused
// GEMMs and says why once on stderr. STRATA_ATTENTION=unfused turns the fused path off.
//
// Included by fused_attention.hpp in CUDA translation units of a build with cuDNN's
// headers (STRATA_HAS_CUDNN, strata::cudnn). The frontend's own JSON library is left out
// (CUDNN_FRONTEND_SKIP_JSON_LIB): it would specialise nlohmann's float serializer for
// every translation unit that includes it, strata's JSON included.
#pragma once
#ifndef NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#endif
#ifndef CUDNN_FRONTEND_SKIP_JSON_LIB
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#endif
#include <cuda_runtime_api.h>
#include <dlfcn.h>

// Without its JSON library the frontend defines these two of nlohmann's macros as
// nothing; a program's own serializers after this header keep nlohmann's.
#pragma push_macro("NLOHMANN_JSON_SERIALIZE_ENUM")
#pragma push_macro("NLOHMANN_DEFINE_TYPE_INTRUSIVE")
#undef NLOHMANN_JSON_SERIALIZE_ENUM
#undef NLOHMANN_DEFINE_TYPE_INTRUSIVE
#include <cudnn_frontend.h>
#pragma pop_macro("NLOHMANN_DEFINE_TYPE_INTRUSIVE")
#pragma pop_macro("NLOHMANN_JSON_SERIALIZE_ENUM")
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "../../core/dtype.hpp"
#include "../../core/error.hpp"
#include "../../space/cuda.hpp"
#include "attention_layout.hpp"
#include "attention_workspace.hpp"
#include "fused_attention.hpp"

namespace cudnn_frontend {
// The library handle the frontend's dynamic loading reads (declared by its shim).
inline void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace strata::nn::detail {

namespace fe = cudnn_frontend;

// The tensors' ids in the graphs and their variant packs.
enum cudnn_attention_uid : std::int64_t { q_uid = 1, k_uid, v_uid, o_uid, stats_uid, do_uid, dq_uid, dk_uid, dv_uid };

// The loaded library, once per process: a handle per device, the graphs per shape.
class cudnn_attention {
 public:
  static cudnn_attention& instance() {
    static cudnn_attention a;
    return a;
  }

  // Why the fused path is off ("" when cuDNN is loaded).
  const std::string& unavailable() const noexcept { return why_; }
  int version() const noexcept { return version_; }

  // The forward and backward plans of one layout, built on first use; nullptr when cuDNN
  // is not loaded or refuses the shape (said once per shape on stderr). Backward's plan is
  // for a chunk of the layout (attention_workspace.hpp), run over all of it.
  struct plans {
    std::shared_ptr<fe::graph::Graph> forward, backward;
    std::int64_t forward_workspace = 0, backward_workspace = 0;
    attention_chunk chunk{0, 0};
    cudnnHandle_t handle = nullptr;
  };
  template <class T>
  const plans* find(const attention_layout& l) {
    if (!why_.empty()) {
      std::call_once(told_, [&] { std::fprintf(stderr, "strata: attention runs unfused: %s\n", why_.c_str()); });
      return nullptr;
    }
    const int device = current_device();
    const std::lock_guard<std::mutex> lock(mutex_);
    if (limit_ == 0) limit_ = attention_workspace_limit();
    const key k{device, std::is_same_v<T, bf16>, l.B, l.S, l.H, l.hd, l.group, l.ldq, l.q_head, l.ldkv, l.kv_head,
                limit_};
    auto it = plans_.find(k);
    if (it == plans_.end()) {
      plans p;
      try {
        p = build<T>(l, handle(device));
      } catch (const std::exception& e) {  // the frontend throws where its own loading fails
        std::fprintf(stderr, "strata: cuDNN's fused attention failed to build (%s); attention runs unfused\n",
                     e.what());
      }
      it = plans_.emplace(k, std::move(p)).first;
    }
    return it->second.forward ? &it->second : nullptr;
  }

  // The most bytes backward's workspace may take (attention_workspace_limit() unless set
  // here); shapes met after a change are planned for the new limit.
  void set_workspace_limit(std::int64_t bytes) {
    expects<config_error>(bytes > 0, "cuDNN attention: the workspace limit must be positive");
    const std::lock_guard<std::mutex> lock(mutex_);
    limit_ = bytes;
  }

  // The forward graph of layout l and the backward graph of its chunk c (the whole layout
  // unless given; the tensors keep l's strides), not yet built for a device, and the
  // forward's statistics tensor. sm, where given, is the GPU generation to check them for
  // without one (validate(); tests/cuda/cudnn_graphs.cu runs where no GPU is).
  struct graph_pair {
    std::shared_ptr<fe::graph::Graph> forward, backward;
    std::shared_ptr<fe::graph::Tensor_attributes> stats;
  };
  template <class T>
  requires(std::is_same_v<T, bf16> || std::is_same_v<T, fp16>)
  static graph_pair graphs_of(const attention_layout& l, int sm = 0, attention_chunk c = {0, 0}) {
    if (c.batch == 0) c = whole(l);
    const fe::DataType_t io = std::is_same_v<T, bf16> ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
    const std::int64_t KV = l.H / l.group, ldo = l.ldo();
    const float scale = attention_scale(l.hd);
    const auto graph = [&] {
      auto g = std::make_shared<fe::graph::Graph>();
      g->set_io_data_type(io)
          .set_intermediate_data_type(fe::DataType_t::FLOAT)
          .set_compute_data_type(fe::DataType_t::FLOAT);
      if (sm > 0) g->set_sm_version(sm);
      return g;
    };
    // By reference: the forward's statistics are the graph's own tensor (a copy would
    // leave it to the frontend's uid and layout inference).
    // A chunk of heads has one batch row (attention_chunk_valid): its statistics are a
    // packed block, as cuDNN before 9.26 requires, whatever the batch stride says.
    const auto stats_attributes = [&](fe::graph::Tensor_attributes& a, std::int64_t B,
                                      std::int64_t H) -> fe::graph::Tensor_attributes& {
      return a.set_uid(stats_uid)
          .set_data_type(fe::DataType_t::FLOAT)
          .set_dim({B, H, l.S, 1})
          .set_stride({(B == 1 ? H : l.H) * l.S, l.S, 1, 1});
    };
    // Forward: O and the statistics (log-sum-exp of the scaled scores, natural log).
    auto f = graph();
    auto q = f->tensor(operand("q", q_uid, l.B, l.H, l.S, l.hd, l.ldq, l.q_head));
    auto k = f->tensor(operand("k", k_uid, l.B, KV, l.S, l.hd, l.ldkv, l.kv_head));
    auto v = f->tensor(operand("v", v_uid, l.B, KV, l.S, l.hd, l.ldkv, l.kv_head));
    auto [o, stats] = f->sdpa(q, k, v,
                              fe::graph::SDPA_attributes()
                                  .set_name("attention")
                                  .set_generate_stats(true)
                                  .set_causal_mask(true)
                                  .set_attn_scale(scale));
    o->set_output(true).set_uid(o_uid).set_dim({l.B, l.H, l.S, l.hd}).set_stride({l.S * ldo, l.hd, ldo, 1});
    stats->set_output(true);
    stats_attributes(*stats, l.B, l.H);
    // Backward, over chunk c: dq, dk, dv laid out as q, k, v.
    const std::int64_t cB = c.batch, cKV = c.kv_heads, cH = c.kv_heads * l.group;
    auto b = graph();
    auto bq = b->tensor(operand("q", q_uid, cB, cH, l.S, l.hd, l.ldq, l.q_head));
    auto bk = b->tensor(operand("k", k_uid, cB, cKV, l.S, l.hd, l.ldkv, l.kv_head));
    auto bv = b->tensor(operand("v", v_uid, cB, cKV, l.S, l.hd, l.ldkv, l.kv_head));
    auto bo = b->tensor(operand("o", o_uid, cB, cH, l.S, l.hd, ldo, l.hd));
    auto bdo = b->tensor(operand("do", do_uid, cB, cH, l.S, l.hd, ldo, l.hd));
    fe::graph::Tensor_attributes saved_stats;
    auto bstats = b->tensor(stats_attributes(saved_stats.set_name("stats"), cB, cH));
    auto [dq, dk, dv] = b->sdpa_backward(bq, bk, bv, bo, bdo, bstats,
                                         fe::graph::SDPA_backward_attributes()
                                             .set_name("attention_backward")
                                             .set_causal_mask(true)
                                             .set_attn_scale(scale)
                                             .set_deterministic_algorithm(true));
    dq->set_output(true).set_uid(dq_uid).set_dim({cB, cH, l.S, l.hd}).set_stride({l.S * l.ldq, l.q_head, l.ldq, 1});
    dk->set_output(true).set_uid(dk_uid).set_dim({cB, cKV, l.S, l.hd}).set_stride({l.S * l.ldkv, l.kv_head, l.ldkv, 1});
    dv->set_output(true).set_uid(dv_uid).set_dim({cB, cKV, l.S, l.hd}).set_stride({l.S * l.ldkv, l.kv_head, l.ldkv, 1});
    return {std::move(f), std::move(b), std::move(stats)};
  }

  cudnn_attention(const cudnn_attention&) = delete;
  cudnn_attention& operator=(const cudnn_attention&) = delete;

 private:
  using key = std::tuple<int, bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                         std::int64_t, std::int64_t, std::int64_t, std::int64_t>;

  cudnn_attention() {
    const char* mode = std::getenv("STRATA_ATTENTION");
    if (mode && std::string_view(mode) == "unfused") {
      why_ = "STRATA_ATTENTION=unfused";
      return;
    }
    const char* path = std::getenv("STRATA_CUDNN_LIBRARY");
    const char* lib = path && *path ? path : "libcudnn.so.9";
    fe::cudnn_dlhandle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!fe::cudnn_dlhandle) {
      const char* e = dlerror();
      why_ = strata::cat("cannot load ", lib, " (", e ? e : "dlopen failed",
                         "); set STRATA_CUDNN_LIBRARY to libcudnn.so.9's path");
      return;
    }
    try {
      version_ = static_cast<int>(fe::detail::get_backend_version());
    } catch (const std::exception& e) {
      why_ = strata::cat(lib, " is not a cuDNN library: ", e.what());
      return;
    }
    // 9.0 is the first with grouped-query fused attention and a deterministic backward.
    if (version_ < 90000) why_ = strata::cat(lib, " is cuDNN ", version_, "; fused attention needs 9.0 or newer");
    // The frontend opens a CUDA runtime of its own, libcudart.so.12 before .13, for its
    // device queries and workspace copies: it must be the one this program runs on (whose
    // current device strata set), not another found on the library path. A user's
    // CUDNN_FRONTEND_CUDART_LIB_NAME stays.
    Dl_info self{};
    if (dladdr(reinterpret_cast<const void*>(&cudaGetDevice), &self) && self.dli_fname &&
        std::string_view(self.dli_fname).find("libcudart") != std::string_view::npos)
      setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", self.dli_fname, 0);
  }

  cudnnHandle_t handle(int device) {
    auto it = handles_.find(device);
    if (it != handles_.end()) return it->second;
    cudnnHandle_t h = nullptr;
    if (fe::detail::create_handle(&h) != CUDNN_STATUS_SUCCESS) h = nullptr;
    handles_.emplace(device, h);  // kept for the process: graphs refer to it
    return h;
  }

  static fe::graph::Tensor_attributes operand(const char* name, std::int64_t uid, std::int64_t B, std::int64_t heads,
                                              std::int64_t S, std::int64_t hd, std::int64_t ld, std::int64_t head) {
    return fe::graph::Tensor_attributes()
        .set_name(name)
        .set_uid(uid)
        .set_dim({B, heads, S, hd})
        .set_stride({S * ld, head, ld, 1});
  }

  template <class T>
  plans build(const attention_layout& l, cudnnHandle_t h) {
    plans p;
    const std::string shape = strata::cat("batch ", l.B, ", ", l.H, " heads over ", l.H / l.group,
                                          " key/value heads, sequence ", l.S, ", head size ", l.hd);
    if (!h) {
      std::fprintf(stderr, "strata: cuDNN made no handle; attention (%s) runs unfused\n", shape.c_str());
      return p;
    }
    const auto refused = [&](const char* what, fe::error_object& e) {
      std::fprintf(stderr, "strata: cuDNN %d refuses fused attention for %s (%s%s); it runs unfused\n", version_,
                   shape.c_str(), what, e.get_message().c_str());
      return plans{};
    };
    // Backward's chunk: the formula's; where the built plan asks for more than the limit
    // all the same, a smaller one, down to one batch row and one key/value head. The
    // forward is built once.
    attention_chunk c = attention_backward_chunk(l, limit_);
    auto [f, b, stats] = graphs_of<T>(l, 0, c);
    if (fe::error_object e = f->build(h, {fe::HeurMode_t::A}); !e.is_good()) return refused("", e);
    // The variant packs name the statistics by stats_uid: the graph must have taken it.
    expects<cuda_error>(stats->get_uid() == stats_uid, [&] {
      return strata::cat("cuDNN attention: the forward's statistics have uid ", stats->get_uid(), ", not ",
                         static_cast<std::int64_t>(stats_uid));
    });
    if (fe::error_object e = f->get_workspace_size(p.forward_workspace); !e.is_good()) return refused("workspace: ", e);
    for (;;) {
      if (fe::error_object e = b->build(h, {fe::HeurMode_t::A}); !e.is_good()) return refused("", e);
      if (fe::error_object e = b->get_workspace_size(p.backward_workspace); !e.is_good())
        return refused("workspace: ", e);
      if (p.backward_workspace > limit_) {
        // The plan asks for more than the formula said: a chunk smaller by the formula,
        // scaled by how far it missed, where a valid one is; else this one, said once.
        const std::int64_t estimate = attention_workspace_bytes(l, c);
        const auto aim = static_cast<std::int64_t>(static_cast<double>(estimate) * static_cast<double>(limit_) /
                                                   static_cast<double>(p.backward_workspace));
        const attention_chunk smaller = attention_backward_chunk(l, std::min(estimate - 1, aim));
        if (attention_workspace_bytes(l, smaller) < estimate) {
          c = smaller;
          b = graphs_of<T>(l, 0, c).backward;
          continue;
        }
        std::fprintf(stderr,
                     "strata: cuDNN's attention backward for %s takes %lld MiB of workspace for %lld batch rows and "
                     "%lld key/value heads at a time, the least it can, over the limit of %lld MiB "
                     "(STRATA_ATTENTION_WORKSPACE_MIB)\n",
                     shape.c_str(), static_cast<long long>(p.backward_workspace >> 20), static_cast<long long>(c.batch),
                     static_cast<long long>(c.kv_heads), static_cast<long long>(limit_ >> 20));
      }
      p.forward = std::move(f);
      p.backward = std::move(b);
      p.chunk = c;
      p.handle = h;
      return p;
    }
  }

  std::string why_;
  int version_ = 0;
  std::int64_t limit_ = 0;  // backward's workspace, bytes; 0 until first read
  std::once_flag told_;
  std::mutex mutex_;
  std::map<int, cudnnHandle_t> handles_;
  std::map<key, plans> plans_;
};

// Runs one plan on exec's stream with its workspace from exec's scratch (own scratch,
// released after, where the executor has none).
inline void cudnn_attention_execute(const executor<cuda>& exec, fe::graph::Graph& g, cudnnHandle_t h,
                                    std::int64_t workspace, std::unordered_map<std::int64_t, void*>& pack,
                                    const char* what) {
  cuda_scratch own;
  cuda_scratch& s = exec.scratch ? *exec.scratch : own;
  void* w = workspace > 0 ? s.get(static_cast<std::size_t>(workspace), exec.stream) : nullptr;
  expects<cuda_error>(fe::detail::set_stream(h, exec.stream) == CUDNN_STATUS_SUCCESS,
                      [&] { return strata::cat("cuDNN attention ", what, ": cudnnSetStream failed"); });
  fe::error_object e = g.execute(h, pack, w);
  expects<cuda_error>(e.is_good(), [&] { return strata::cat("cuDNN attention ", what, ": ", e.get_message()); });
  own.release(exec.stream);
}

// The CUDA space's fused attention (fused_attention.hpp): cuDNN's graphs, for 16-bit
// activations (fp32 keeps the unfused GEMMs).
template <>
struct fused_attention<cuda> {
  // Whether attention of layout l runs fused: cuDNN is loaded and took the shape.
  template <class T>
  requires(std::is_same_v<T, bf16> || std::is_same_v<T, fp16>)
  static bool takes(const attention_layout& l) {
    return cudnn_attention::instance().find<T>(l) != nullptr;
  }

  // out and lse [B, H, S] (float) from q, k, v.
  template <class T>
  static void forward(const executor<cuda>& exec, const attention_layout& l, const T* q, const T* k, const T* v,
                      float* lse, T* out) {
    const auto& p = plans_of<T>(l);
    std::unordered_map<std::int64_t, void*> pack{{q_uid, const_cast<T*>(q)},
                                                 {k_uid, const_cast<T*>(k)},
                                                 {v_uid, const_cast<T*>(v)},
                                                 {o_uid, out},
                                                 {stats_uid, lse}};
    cudnn_attention_execute(exec, *p.forward, p.handle, p.forward_workspace, pack, "forward");
  }

  // dq, dk, dv (written) from the forward's out and lse, a chunk of batch rows and
  // key/value heads at a time (attention_workspace.hpp), one workspace for all.
  template <class T>
  static void backward(const executor<cuda>& exec, const attention_layout& l, const T* q, const T* k, const T* v,
                       const float* lse, const T* out, const T* d_out, T* dq, T* dk, T* dv) {
    const auto& p = plans_of<T>(l);
    const std::int64_t KV = l.H / l.group;
    for (std::int64_t b = 0; b < l.B; b += p.chunk.batch)
      for (std::int64_t g = 0; g < KV; g += p.chunk.kv_heads) {
        const std::int64_t h = g * l.group;  // the chunk's first query head
        const std::int64_t at_q = b * l.S * l.ldq + h * l.q_head, at_kv = b * l.S * l.ldkv + g * l.kv_head;
        const std::int64_t at_o = b * l.S * l.ldo() + h * l.hd, at_stats = (b * l.H + h) * l.S;
        std::unordered_map<std::int64_t, void*> pack{{q_uid, const_cast<T*>(q + at_q)},
                                                     {k_uid, const_cast<T*>(k + at_kv)},
                                                     {v_uid, const_cast<T*>(v + at_kv)},
                                                     {o_uid, const_cast<T*>(out + at_o)},
                                                     {stats_uid, const_cast<float*>(lse + at_stats)},
                                                     {do_uid, const_cast<T*>(d_out + at_o)},
                                                     {dq_uid, dq + at_q},
                                                     {dk_uid, dk + at_kv},
                                                     {dv_uid, dv + at_kv}};
        cudnn_attention_execute(exec, *p.backward, p.handle, p.backward_workspace, pack, "backward");
      }
  }

 private:
  // Built when takes() said yes, and kept.
  template <class T>
  static const cudnn_attention::plans& plans_of(const attention_layout& l) {
    const auto* p = cudnn_attention::instance().find<T>(l);
    expects(p != nullptr, "attention: cuDNN's plan for a shape it took went missing");
    return *p;
  }
};

}  // namespace strata::nn::detail
