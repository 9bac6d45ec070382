// engine<Space>: the buffer work of a training step in one space — fills, copies,
// gradient accumulation, 16-bit casts, the squared norm, the optimizer step, moving
// values to and from the host. The trainer is written once
// against it; the host engine is here, the CUDA engine in cuda_engine.cuh.
#pragma once
#include <algorithm>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../comm/environment.hpp"
#include "../../kernels/reduce.hpp"
#include "../../optim/shard.hpp"
#include "../../space/host.hpp"
#include "../step_profile.hpp"
#include "sharded_state.hpp"

namespace strata::detail {

template <class Space>
class engine;  // engine<cuda>: train/detail/cuda_engine.cuh (include <strata/cuda.cuh>)

template <class Space>
concept has_engine = requires { sizeof(engine<Space>); };

using index_range = std::pair<std::size_t, std::size_t>;

template <>
class engine<host> {
 public:
  explicit engine(std::size_t /*largest buffer*/ = 0) {}

  // Gradients and params move over the host communicators themselves.
  using comm_type = world_comm;

  executor<host> exec() const noexcept { return {}; }
  void synchronize() noexcept {}
  // A step profile's timeline (train/step_profile.hpp).
  using marks_type = host_marks;
  host_marks& marks() noexcept { return marks_; }
  // The host's id checks read the values where they are, at once: none wait.
  void settle_id_checks() noexcept {}

  void fill(float* p, std::size_t n, float v) { std::fill_n(p, n, v); }
  void copy(float* dst, const float* src, std::size_t n) { std::copy_n(src, n, dst); }
  // acc = in (first) or acc += in.
  void accumulate(float* acc, const float* in, std::size_t n, bool first) {
    if (first)
      std::copy_n(in, n, acc);
    else
      for (std::size_t i = 0; i < n; ++i) acc[i] += in[i];
  }
  template <class P>
  void narrow(const float* in, P* out, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out[i] = P(in[i]);
  }
  template <class P>
  void widen_accumulate(const P* in, float* acc, std::size_t n, bool first) {
    if (first)
      for (std::size_t i = 0; i < n; ++i) acc[i] = static_cast<float>(in[i]);
    else
      for (std::size_t i = 0; i < n; ++i) acc[i] += static_cast<float>(in[i]);
  }
  // out = master rounded to the compute precision P (a copy in fp32).
  template <class P>
  void round_into(const float* master, float* out, std::size_t n) {
    if constexpr (std::is_same_v<P, float>)
      std::copy_n(master, n, out);
    else
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(P(master[i]));
  }
  // Sum of squares over runs [lo, hi) of base, in run order.
  double sum_squares(const float* base, std::span<const index_range> runs) {
    double sq = 0;
    for (const auto& [lo, hi] : runs) sq += kernels::sum_squares(std::span<const float>(base + lo, hi - lo));
    return sq;
  }

  // The optimizer step over prepared groups of runs (each run with its decay flag): group
  // 0 is the shard's runs; ZeRO-0 steps a bucket at a time, one group per bucket with
  // runs relative to it (train/detail/shard_update.hpp).
  void prepare_step(std::span<const update_run> runs, std::size_t /*elements*/, std::size_t group = 0) {
    if (groups_.size() <= group) groups_.resize(group + 1);
    groups_[group].assign(runs.begin(), runs.end());
  }
  // With a.param_out, each run writes its compute params at param_out + out_begin.
  template <class Optimizer, class P>
  void step(const Optimizer& opt, const shard_args<P, float>& a, float lr, float grad_scale, long step,
            std::size_t group = 0) {
    for (const auto& r : groups_.at(group)) step_run(opt, a, r, lr, grad_scale, step);
  }
  template <class Optimizer, class P>
  void step_run(const Optimizer& opt, const shard_args<P, float>& a, const update_run& r, float lr, float grad_scale,
                long step) {
    opt.step(a.slice(r.begin, r.end - r.begin, r.out_shift()), lr, grad_scale, r.decay, step);
  }

  void download(float* host_dst, const float* src, std::size_t n) { std::copy_n(src, n, host_dst); }
  void upload(float* dst, const float* host_src, std::size_t n) { std::copy_n(host_src, n, dst); }

 private:
  std::vector<std::vector<update_run>> groups_;
  host_marks marks_;
};

}  // namespace strata::detail
