// What an optimizer step works on: the local flat shard (master weights, grads, moment
// buffers, 16-bit param copy) and the runs of it that share a weight-decay flag.
#pragma once
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../kernels/host_driver.hpp"
#include "../kernels/rounding.hpp"

namespace strata {

// One flat shard. master is fp32 (the params themselves in fp32 mode, where param_out is
// null or a float copy); grad is G (float, bf16 or fp16); state0/state1 are the
// optimizer's moment buffers (state_slots of them, zero-filled before the first step);
// param_out is the compute copy (rounded to P) written in the same pass. seed and
// global_offset (the index of element 0 in the whole flat parameter buffer) make
// stochastic rounding a function of (seed, step, global index), independent of how the
// buffer is sharded.
template <class P, class G>
struct shard_args {
  float* master = nullptr;
  const G* grad = nullptr;
  float* state0 = nullptr;
  float* state1 = nullptr;
  P* param_out = nullptr;
  std::size_t n = 0;
  strata::rounding rounding = strata::rounding::nearest_even;
  std::uint64_t seed = 0;
  std::size_t global_offset = 0;

  // The sub-shard [offset, offset + count), with every pointer moved along.
  shard_args slice(std::size_t offset, std::size_t count) const {
    shard_args s = *this;
    auto at = [offset](auto* p) { return p ? p + offset : p; };
    s.master = at(master);
    s.grad = at(grad);
    s.state0 = at(state0);
    s.state1 = at(state1);
    s.param_out = at(param_out);
    s.n = count;
    s.global_offset = global_offset + offset;
    return s;
  }
  // The same sub-shard, its compute copy written out_shift elements further along
  // param_out than its master sits in master (decay_run::out_shift).
  shard_args slice(std::size_t offset, std::size_t count, std::ptrdiff_t out_shift) const {
    shard_args s = slice(offset, count);
    if (s.param_out) s.param_out += out_shift;
    return s;
  }
};

// A contiguous run of a shard whose params all decay or all do not (AdamW and Lion do
// not decay 1-D params by default: param::decay). offset is relative to the shard.
// out_shift: where the run's compute copy goes, relative to its offset (param_out[i +
// out_shift] for element i): a trainer's ZeRO-1/2 write each bucket's piece where it sits
// in the full params, not where it sits in the shard.
struct decay_run {
  std::size_t offset = 0;
  std::size_t count = 0;
  bool decay = true;
  std::ptrdiff_t out_shift = 0;
  friend bool operator==(const decay_run&, const decay_run&) = default;
};

// Appends [offset, offset + count) to a run table, merging it into the last run when
// they touch and share the flag, so a shard of many small params yields few runs.
inline void add_decay_run(std::vector<decay_run>& runs, std::size_t offset, std::size_t count, bool decay) {
  if (count == 0) return;
  if (!runs.empty()) {
    decay_run& last = runs.back();
    expects<config_error>(offset >= last.offset + last.count,
                          strata::cat("add_decay_run: run at ", offset, " overlaps or precedes the run [", last.offset,
                                      ", ", last.offset + last.count, ")"));
    if (last.decay == decay && last.offset + last.count == offset && last.out_shift == 0) {
      last.count += count;
      return;
    }
  }
  runs.push_back({offset, count, decay});
}

// What the trainer needs from an optimizer policy.
template <class O>
concept optimizer = requires(const O& o, const shard_args<float, float>& a) {
  { O::state_slots } -> std::convertible_to<int>;
  { O::name } -> std::convertible_to<const char*>;
  o.step(a, 1.0f, 1.0f, true, 1L);
};

// Whether a policy's step writes shard_args::param_out where it is not null (the built-in
// ones say so): a trainer rounds the compute params after the step of one that does not.
template <class O>
concept writes_param_out = requires { requires O::writes_param_out; };

// Steps every run of a shard table with its decay flag. Runs must be sorted, disjoint
// and inside the shard; elements outside every run (padding) are left alone. The CUDA
// driver will take the same table and do one launch.
template <class O, class P, class G>
void step_runs(const O& opt, const shard_args<P, G>& a, std::span<const decay_run> runs, float lr, float grad_scale,
               long step) {
  std::size_t end = 0;
  for (const decay_run& r : runs) {
    expects<config_error>(r.offset >= end && r.offset <= a.n && r.count <= a.n - r.offset,
                          strata::cat(O::name, ": decay run [", r.offset, ", ", r.offset + r.count,
                                      ") is out of order or outside the shard of ", a.n, " elements"));
    end = r.offset + r.count;
  }
  for (const decay_run& r : runs)
    if (r.count) opt.step(a.slice(r.offset, r.count, r.out_shift), lr, grad_scale, r.decay, step);
}

namespace detail {

// Checks shared by every optimizer's step; messages name the optimizer and the value.
// They run every step, so each message is built only when its check fails.
template <class P, class G>
void check_step(const char* opt, const shard_args<P, G>& a, int slots, float lr, float grad_scale, long step) {
  expects<config_error>(std::isfinite(lr) && lr >= 0.0f,
                        [&] { return cat(opt, ": learning rate must be finite and >= 0, got ", lr); });
  expects<config_error>(std::isfinite(grad_scale), [&] {
    return cat(opt, ": grad_scale (clip coefficient / loss scale) must be finite, got ", grad_scale,
               "; skip the step when the gradients overflowed");
  });
  expects<config_error>(step >= 1, [&] { return cat(opt, ": step counts optimizer steps from 1, got ", step); });
  if (a.n == 0) return;
  expects(a.master && a.grad,
          [&] { return cat(opt, ": shard of ", a.n, " elements without master weights or grads"); });
  expects(slots < 1 || a.state0, [&] { return cat(opt, ": state buffer 0 is null"); });
  expects(slots < 2 || a.state1, [&] { return cat(opt, ": state buffer 1 is null"); });
  expects(std::is_same_v<P, float> || a.param_out, [&] {
    return cat(opt, ": a 16-bit param copy needs param_out (mixed precision writes it in the same pass)");
  });
}

// Calls fn with the write mode as a compile-time constant.
template <class P, class G, class Fn>
void with_write_mode(const shard_args<P, G>& a, Fn&& fn) {
  using kernels::write_mode;
  if (!a.param_out)
    fn(std::integral_constant<write_mode, write_mode::none>{});
  else if (a.rounding == rounding::stochastic && !std::is_same_v<P, float>)
    fn(std::integral_constant<write_mode, write_mode::stochastic>{});
  else
    fn(std::integral_constant<write_mode, write_mode::nearest_even>{});
}

// An optimizer's step on the host: its hyperparameters and the shard checked, then its
// update functor (the one the CUDA driver runs too) over every element.
template <class Opt, class P, class G>
void step_on_host(const Opt& opt, const shard_args<P, G>& a, float lr, float grad_scale, bool decay, long step) {
  opt.validate();
  check_step(Opt::name, a, Opt::state_slots, lr, grad_scale, step);
  if (a.n == 0) return;
  with_write_mode(a, [&](auto mode) {
    kernels::run_host(a.n, opt.template update<decltype(mode)::value>(a, lr, grad_scale, decay, step));
  });
}

inline std::uint64_t step_rounding_key(std::uint64_t seed, long step) {
  return kernels::detail::rounding_key(seed, static_cast<std::uint64_t>(step));
}

// The double a float hyperparameter was written as: its shortest round-trip decimal
// (0.999f -> 0.999). torch keeps hyperparameters as Python doubles and computes 1 - beta2,
// beta2^t and 1 - lr * wd in double; doing the same from the float itself would make
// 1 - beta2 about 1.3e-5 relative off for beta2 = 0.999 (the float is 0.99900001287...),
// so strata's step scalars start from the decimal instead. Exact for every value a
// user types as a short decimal, within float rounding of the float otherwise.
inline double as_decimal(float x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  double d = x;
  if (r.ec == std::errc{}) std::from_chars(buf, r.ptr, d);
  return d;
}

inline void check_beta(const char* opt, const char* field, float b) {
  expects<config_error>(b >= 0.0f && b < 1.0f, [&] { return cat(opt, ": ", field, " must be in [0, 1), got ", b); });
}
inline void check_nonnegative(const char* opt, const char* field, float x) {
  expects<config_error>(std::isfinite(x) && x >= 0.0f,
                        [&] { return cat(opt, ": ", field, " must be finite and >= 0, got ", x); });
}

}  // namespace detail
}  // namespace strata
