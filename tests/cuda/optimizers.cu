// The CUDA driver of the optimizer updates against the host driver: AdamW, SGD (plain,
// momentum, nesterov) and Lion over a shard with decay runs and padding, fp32 and mixed
// precision (bf16/fp16 params, round to nearest even and stochastic). The two drivers run
// the same functors, so every buffer must match bit for bit after every step, also where
// a run's 16-bit copy goes elsewhere (decay_run::out_shift).
#include <cstdint>
#include <cstring>
#include <random>
#include <strata/optim/adamw.hpp>
#include <strata/optim/cuda_optim.cuh>
#include <strata/optim/lion.hpp>
#include <strata/optim/sgd.hpp>
#include <strata/space/cuda.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "catch.hpp"

namespace {

using strata::bf16;
using strata::decay_run;
using strata::fp16;

// Index of the first element whose bits differ, or -1.
template <class T>
long first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) return static_cast<long>(i);
  return -1;
}

template <class T>
std::vector<T> to_host(const strata::cuda_buffer<T>& d) {
  std::vector<T> h(d.size());
  if (!h.empty()) strata::cuda::copy(h.data(), d.data(), d.bytes());
  return h;
}

template <class T>
strata::cuda_buffer<T> to_device(const std::vector<T>& h) {
  strata::cuda_buffer<T> d(h.size());
  if (!h.empty()) strata::cuda::copy(d.data(), h.data(), d.bytes());
  return d;
}

template <class T>
std::vector<T> random_vector(std::size_t n, float scale, std::mt19937& gen) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float x = i % 97 == 0 ? 0.0f : dist(gen);  // exact zeros: the sign and decay branches
    if constexpr (std::is_same_v<T, float>)
      v[i] = x;
    else
      v[i] = T(x);
  }
  return v;
}

// A shard of n elements: padding at both ends and between runs, decayed and undecayed
// runs, runs longer than a tile and runs of a few elements.
std::vector<decay_run> make_runs(std::size_t n) {
  std::vector<decay_run> runs;
  strata::add_decay_run(runs, 100, 300'000, true);
  strata::add_decay_run(runs, 300'100, 10, false);
  strata::add_decay_run(runs, 300'110, 399'890, true);
  strata::add_decay_run(runs, 700'128, n - 700'128 - 7, false);
  return runs;
}

// The same runs, each writing its compute copy elsewhere (decay_run::out_shift, as a
// ZeRO-1/2 trainer's do): to the front, past a multiple of the vector width, and by
// shifts that are not one (element-wise then), no two runs' copies overlapping.
std::vector<decay_run> shift_runs(std::vector<decay_run> runs) {
  const std::ptrdiff_t shifts[] = {-96, 3, 8, 1};
  for (std::size_t i = 0; i < runs.size(); ++i) runs[i].out_shift = shifts[i];
  return runs;
}

// shifted: the runs of shift_runs, and a compute copy in fp32 too (a trainer's fp32
// params, written by the step).
template <class O, class P, class G>
void compare_drivers(const O& opt, strata::rounding rounding, int steps = 3, bool shifted = false) {
  constexpr bool mixed = !std::is_same_v<P, float>;
  const bool copy = mixed || shifted;
  const std::size_t n = 1'000'003;
  std::mt19937 gen(1234);
  const auto runs = shifted ? shift_runs(make_runs(n)) : make_runs(n);
  const strata::cuda_run_table table(runs, n);

  auto master = random_vector<float>(n, 1.0f, gen);
  auto state0 = std::vector<float>(n, 0.0f);
  auto state1 = std::vector<float>(n, 0.0f);
  std::vector<P> param(copy ? n : 0);
  auto d_master = to_device(master), d_state0 = to_device(state0), d_state1 = to_device(state1);
  auto d_param = to_device(param);

  strata::shard_args<P, G> h{master.data(), nullptr, state0.data(), state1.data(), copy ? param.data() : nullptr, n,
                             rounding,      99,      5'000};
  strata::shard_args<P, G> d{d_master.data(),
                             nullptr,
                             d_state0.data(),
                             d_state1.data(),
                             copy ? d_param.data() : nullptr,
                             n,
                             rounding,
                             99,
                             5'000};
  strata::cuda_stream stream;
  for (int step = 1; step <= steps; ++step) {
    const auto grad = random_vector<G>(n, 0.1f, gen);
    auto d_grad = to_device(grad);
    h.grad = grad.data();
    d.grad = d_grad.data();
    const float lr = 1e-3f * static_cast<float>(step), grad_scale = step == 2 ? 0.5f : 1.0f;
    strata::step_runs(opt, h, runs, lr, grad_scale, step);
    strata::step_runs_cuda(opt, d, table, lr, grad_scale, step, stream.get());
    stream.synchronize();
    INFO("step " << step);
    CHECK(first_difference(to_host(d_master), master) == -1);
    CHECK(first_difference(to_host(d_state0), state0) == -1);
    CHECK(first_difference(to_host(d_state1), state1) == -1);
    if (copy) CHECK(first_difference(to_host(d_param), param) == -1);
  }
  // The step did something (padding excepted): the comparison is not of untouched buffers.
  std::mt19937 regen(1234);
  const auto initial = random_vector<float>(n, 1.0f, regen);
  CHECK(master[50] == initial[50]);            // padding before the first run
  CHECK(master[n - 1] == initial[n - 1]);      // padding after the last run
  CHECK(master[200'000] != initial[200'000]);  // inside a decay run
  if (copy) {
    // Stochastic rounding takes the other neighbour somewhere; nearest-even never does.
    std::size_t away = 0;
    for (const auto& r : runs)
      for (std::size_t i = r.offset; i < r.offset + r.count; ++i)
        away += !(param[static_cast<std::size_t>(static_cast<std::ptrdiff_t>(i) + r.out_shift)] ==
                  strata::round_to<P>(master[i]));
    if (rounding == strata::rounding::stochastic)
      CHECK(away > 1000);
    else
      CHECK(away == 0);
  }
}

template <class O>
void compare_precisions(const O& opt) {
  SECTION("fp32") { compare_drivers<O, float, float>(opt, strata::rounding::nearest_even); }
  SECTION("bf16 params and grads, nearest even") {
    compare_drivers<O, bf16, bf16>(opt, strata::rounding::nearest_even);
  }
  SECTION("bf16 params and grads, stochastic") { compare_drivers<O, bf16, bf16>(opt, strata::rounding::stochastic); }
  SECTION("fp16 params and grads, nearest even") {
    compare_drivers<O, fp16, fp16>(opt, strata::rounding::nearest_even);
  }
  SECTION("fp16 params and grads, stochastic") { compare_drivers<O, fp16, fp16>(opt, strata::rounding::stochastic); }
  SECTION("bf16 params, fp32 grads") { compare_drivers<O, bf16, float>(opt, strata::rounding::nearest_even); }
  SECTION("runs written elsewhere, fp32 copy") {
    compare_drivers<O, float, float>(opt, strata::rounding::nearest_even, 2, true);
  }
  SECTION("runs written elsewhere, bf16 copy") {
    compare_drivers<O, bf16, bf16>(opt, strata::rounding::nearest_even, 2, true);
  }
  SECTION("runs written elsewhere, fp16 stochastic") {
    compare_drivers<O, fp16, fp16>(opt, strata::rounding::stochastic, 2, true);
  }
}

}  // namespace

TEST_CASE("AdamW: CUDA and host drivers give the same bits") {
  compare_precisions(strata::adamw{.weight_decay = 0.1f});
  SECTION("without bias correction") {
    strata::adamw o;
    o.bias_correction = false;
    compare_drivers<strata::adamw, float, float>(o, strata::rounding::nearest_even);
  }
}

TEST_CASE("SGD: CUDA and host drivers give the same bits") {
  SECTION("plain, with weight decay") { compare_precisions(strata::sgd{.weight_decay = 0.01f}); }
  SECTION("momentum with dampening") {
    compare_precisions(strata::sgd{.momentum = 0.9f, .dampening = 0.1f, .weight_decay = 0.01f});
  }
  SECTION("nesterov") { compare_precisions(strata::sgd{.momentum = 0.9f, .nesterov = true, .weight_decay = 0.01f}); }
}

TEST_CASE("Lion: CUDA and host drivers give the same bits") { compare_precisions(strata::lion{.weight_decay = 0.1f}); }

TEST_CASE("bad steps are refused before anything is queued") {
  const std::size_t n = 1000;
  strata::cuda_buffer<float> m(n), g(n), s0(n), s1(n);
  std::vector<decay_run> runs{{0, n, true}};
  const strata::cuda_run_table table(runs, n);
  strata::shard_args<float, float> a{m.data(), g.data(), s0.data(), s1.data(), nullptr, n};
  strata::adamw opt;
  CHECK_THROWS_AS(strata::step_runs_cuda(opt, a, table, -1.0f, 1.0f, 1, nullptr), strata::config_error);
  CHECK_THROWS_AS(strata::step_runs_cuda(opt, a, table, 1e-3f, 1.0f, 0, nullptr), strata::config_error);
  const strata::cuda_run_table other(runs, n + 1);
  CHECK_THROWS_AS(strata::step_runs_cuda(opt, a, other, 1e-3f, 1.0f, 1, nullptr), strata::config_error);
  std::vector<decay_run> bad{{0, 10, true}, {5, 10, false}};
  CHECK_THROWS_AS(strata::cuda_run_table(bad, n), strata::config_error);
}
