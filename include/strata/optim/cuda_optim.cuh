// The optimizer policies (adamw, sgd, lion) on the CUDA driver: the same update functors
// (kernels/) and step scalars as their host step(), over a shard's decay runs in one launch.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "../kernels/adamw.hpp"
#include "../kernels/cuda_driver.cuh"
#include "../kernels/lion.hpp"
#include "../kernels/sgd.hpp"
#include "adamw.hpp"
#include "cuda_run_table.hpp"
#include "lion.hpp"
#include "sgd.hpp"

namespace strata {

namespace detail {

// f with its compute copy written `shift` elements further along (decay_run::out_shift).
template <class F>
__device__ __forceinline__ F shifted_out(F f, std::ptrdiff_t shift) {
  if constexpr (requires { f.param_out; })
    if (f.param_out) f.param_out += shift;
  return f;
}

// Runs one tile [begin, end) of a run: its vector form where the functors have one and
// their arrays are aligned and the run's shifted param_out stays aligned too.
template <bool Vector, class F>
__device__ __forceinline__ void run_tile(const F& f, std::size_t begin, std::size_t end, std::ptrdiff_t shift) {
  if constexpr (Vector) {
    if (shift % static_cast<std::ptrdiff_t>(F::vector_width) == 0)
      return kernels::detail::run_range_vector(f, begin, end);
  }
  kernels::detail::run_range(f, begin, end);
}

// Each block walks tiles of the run table; within a tile, consecutive threads take
// consecutive elements (coalesced), or consecutive vectors of them (Vector: functors with
// a vector form, every array aligned). A run's flag and shift are uniform over its tiles,
// so the branches between the functors never diverge inside a block.
template <class F, bool Vector = false>
__global__ void __launch_bounds__(kernels::detail::cuda_block)
    runs_kernel(const device_run* runs, int nruns, std::size_t tiles, F decayed, F undecayed) {
  for (std::size_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    int lo = 0, hi = nruns - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (runs[mid].first_tile <= t)
        lo = mid;
      else
        hi = mid - 1;
    }
    const device_run r = runs[lo];
    const std::size_t begin = r.offset + (t - r.first_tile) * cuda_run_tile;
    const std::size_t end = begin + cuda_run_tile < r.offset + r.count ? begin + cuda_run_tile : r.offset + r.count;
    // Two calls, not a pointer picked at run time: either functor stays in parameter
    // space (a shifted run, a ZeRO-1/2 trainer's, works on a copy).
    if (r.out_shift == 0) {
      if (r.decay)
        run_tile<Vector>(decayed, begin, end, 0);
      else
        run_tile<Vector>(undecayed, begin, end, 0);
    } else {
      if (r.decay)
        run_tile<Vector>(shifted_out(decayed, r.out_shift), begin, end, r.out_shift);
      else
        run_tile<Vector>(shifted_out(undecayed, r.out_shift), begin, end, r.out_shift);
    }
  }
}

// One launch of runs_kernel<F, Vector> over the table, as many blocks as stay resident.
template <bool Vector, class F>
void launch_runs(const cuda_run_table& table, const F& decayed, const F& undecayed, cudaStream_t stream) {
  constexpr auto kernel = &runs_kernel<F, Vector>;
  const int blocks = static_cast<int>(std::min<std::size_t>(table.tiles(), kernels::detail::resident_blocks<kernel>()));
  strata::detail::clear_stale_cuda_error();
  kernel<<<blocks, kernels::detail::cuda_block, 0, stream>>>(table.device_data(), table.runs(), table.tiles(), decayed,
                                                             undecayed);
  kernels::detail::check_launch("run_cuda_runs");
}

}  // namespace detail

// Runs decayed(i) for the elements of the table's decay runs and undecayed(i) for those
// of its other runs, in one launch on `stream`; elements outside every run are untouched.
template <class F>
void run_cuda_runs(const cuda_run_table& table, const F& decayed, const F& undecayed, cudaStream_t stream) {
  if (table.tiles() == 0) return;
  if constexpr (kernels::detail::vector_functor<F>) {
    if (decayed.vector_aligned() && undecayed.vector_aligned())
      return detail::launch_runs<true>(table, decayed, undecayed, stream);
  }
  detail::launch_runs<false>(table, decayed, undecayed, stream);
}

namespace detail {

// The functors of a decay run and of an undecayed run that one step of `o` runs, given to
// emit(decayed, undecayed): the policy's own update(), which its host step() runs too.
template <kernels::write_mode W, class O, class P, class G, class Emit>
void make_update(const O& o, const shard_args<P, G>& a, float lr, float grad_scale, long step, Emit&& emit) {
  if constexpr (std::is_same_v<O, sgd>) {
    if (o.momentum != 0.0f)
      emit(o.template update<W, true>(a, lr, grad_scale, true, step),
           o.template update<W, true>(a, lr, grad_scale, false, step));
    else
      emit(o.template update<W, false>(a, lr, grad_scale, true, step),
           o.template update<W, false>(a, lr, grad_scale, false, step));
  } else {
    emit(o.template update<W>(a, lr, grad_scale, true, step), o.template update<W>(a, lr, grad_scale, false, step));
  }
}

// The state buffers a step reads, as the host step() checks them.
inline int slots_used(const adamw&) { return adamw::state_slots; }
inline int slots_used(const sgd& o) { return o.momentum != 0.0f ? 1 : 0; }
inline int slots_used(const lion&) { return lion::state_slots; }

}  // namespace detail

// One optimizer step of a shard on the device: what step_runs(opt, a, runs, ...) does on
// the host, with the shard's pointers in device memory and the runs in `table`. Queued
// on `stream`; the host returns at once. Bad arguments throw before anything is queued.
template <class O, class P, class G>
void step_runs_cuda(const O& opt, const shard_args<P, G>& a, const cuda_run_table& table, float lr, float grad_scale,
                    long step, cudaStream_t stream) {
  opt.validate();
  detail::check_step(O::name, a, detail::slots_used(opt), lr, grad_scale, step);
  expects<config_error>(table.shard_size() == a.n, [&] {
    return strata::cat(O::name, ": the run table was built for a shard of ", table.shard_size(),
                       " elements, the shard has ", a.n);
  });
  if (a.n == 0) return;
  detail::with_write_mode(a, [&](auto mode) {
    detail::make_update<decltype(mode)::value>(
        opt, a, lr, grad_scale, step,
        [&](const auto& decayed, const auto& undecayed) { run_cuda_runs(table, decayed, undecayed, stream); });
  });
}

}  // namespace strata
