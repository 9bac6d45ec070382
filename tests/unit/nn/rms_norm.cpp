// nn::rms_norm against a double reference (rows of very different scales), finite
// differences for weight and input, += semantics, reuse, and bad shapes.
#include <strata/nn/residual.hpp>
#include <strata/nn/rms_norm.hpp>
#include <strata/space/host_ops.hpp>

#include <cstring>

#include "support.hpp"

using namespace nn_test;
namespace nn = strata::nn;

namespace {

std::vector<double> reference(const nn::rms_norm& n, const tensor<float>& x) {
  const auto d = n.dim(), rows = static_cast<std::int64_t>(x.numel()) / d;
  std::vector<double> y(x.numel());
  for (std::int64_t r = 0; r < rows; ++r) {
    double ms = 0.0;
    for (std::int64_t j = 0; j < d; ++j) ms += static_cast<double>(x[r * d + j]) * x[r * d + j];
    ms /= d;
    for (std::int64_t j = 0; j < d; ++j) y[r * d + j] = x[r * d + j] / std::sqrt(ms + n.eps) * n.weight.data()[j];
  }
  return y;
}

}  // namespace

TEST_CASE("make_rms_norm: ones, no decay, eps") {
  auto n = nn::make_rms_norm(12);
  CHECK(n.weight.shape == shape{12});
  CHECK(n.weight.init.k == strata::init_spec::kind::ones);
  CHECK_FALSE(n.weight.decay);
  CHECK(n.eps == 1e-6f);
  CHECK_THROWS_AS(nn::make_rms_norm(0), strata::config_error);
  CHECK_THROWS_AS(nn::make_rms_norm(4, 0.0f), strata::config_error);
}

TEST_CASE("rms_norm forward matches a double reference") {
  std::mt19937 rng(30);
  param_store store;
  context ctx;
  auto n = nn::make_rms_norm(40);
  store.bind(n.weight, rng, 0.5f, 1.5f);
  nn::rms_norm::cache c;
  tensor<float> y;
  for (float scale : {1e-3f, 1.0f, 1e3f}) {  // the result does not depend on the row's scale
    auto x = random_tensor(shape{3, 5, 40}, rng, -scale, scale);
    n.forward(ctx, x, y, c);
    const auto ref = reference(n, x);
    // Each output is a float product of x, rstd and weight: three roundings of 2^-24
    // on an O(1) value, plus rstd's float rounding.
    for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(std::abs(y[i] - ref[i]) <= 5e-7 * (1.0 + std::abs(ref[i])));
  }
  SECTION("threaded rows") {
    auto big = nn::make_rms_norm(256);
    store.bind(big.weight, rng);
    auto x = random_tensor(shape{200, 256}, rng, -3.0f, 3.0f);
    big.forward(ctx, x, y, c);
    const auto ref = reference(big, x);
    for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(std::abs(y[i] - ref[i]) <= 5e-7 * (1.0 + std::abs(ref[i])));
  }
}

TEST_CASE("rms_norm backward matches finite differences and accumulates") {
  std::mt19937 rng(31);
  param_store store;
  context ctx;
  auto n = nn::make_rms_norm(16);
  store.bind(n.weight, rng, 0.5f, 1.5f);
  auto x = random_tensor(shape{2, 3, 16}, rng, -2.0f, 2.0f);
  check_gradients(n, ctx, x, {&n.weight}, rng);
  check_accumulates(n, ctx, x, {&n.weight}, rng);

  auto big = nn::make_rms_norm(256);
  store.bind(big.weight, rng);
  auto xb = random_tensor(shape{200, 256}, rng, -2.0f, 2.0f);
  // 51200 outputs: sqrt(n) is 28 times the 64-output budget.
  check_gradients(big, ctx, xb, {&big.weight}, rng, {.abs_tol = 7e-3, .stride = 211});
  check_no_allocation(big, ctx, xb, rng);
}

TEST_CASE("rms_norm: a mismatched input is a config error naming the layer") {
  std::mt19937 rng(32);
  param_store store;
  context ctx;
  auto n = nn::make_rms_norm(8);
  n.weight.name = "layers.0.input_layernorm.weight";
  store.bind(n.weight, rng);
  nn::rms_norm::cache c;
  tensor<float> y;
  const auto x = random_tensor(shape{2, 6}, rng);
  const auto msg = message_of<strata::config_error>([&] { n.forward(ctx, x, y, c); });
  CHECK_CONTAINS(msg, "rms_norm layers.0.input_layernorm: input has 6 features, weight expects 8");
}

TEST_CASE("rms_norm forward_residual, backward_residual, forward_again: the bits of the unfused passes") {
  std::mt19937 rng(33);
  param_store store;
  context ctx;
  auto n = nn::make_rms_norm(48), m = n;
  store.bind(n.weight, rng, 0.5f, 1.5f);
  store.bind(m.weight, rng, 0.5f, 1.5f);
  std::copy_n(n.weight.data(), 48, m.weight.data());
  const auto x = random_tensor(shape{3, 7, 48}, rng, -2.0f, 2.0f), res = random_tensor(shape{3, 7, 48}, rng);
  const auto dy = random_tensor(shape{3, 7, 48}, rng), dres = random_tensor(shape{3, 7, 48}, rng);
  const auto bits = [](const tensor<float>& a, const tensor<float>& b) {
    return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.numel() * sizeof(float)) == 0;
  };
  const auto copy = [](const tensor<float>& t) {
    tensor<float> r(t.shape());
    std::copy_n(t.data(), t.numel(), r.data());
    return r;
  };
  // Two passes each, as a decoder layer made them before.
  tensor<float> h = copy(x), y, dx;
  nn::rms_norm::cache c;
  nn::add_into(ctx, h, res);
  n.forward(ctx, h, y, c);
  n.backward(ctx, dy, dx, c);
  nn::add_into(ctx, dx, dres);
  // One each.
  tensor<float> h2 = copy(x), y2, dx2;
  nn::rms_norm::cache c2;
  m.forward_residual(ctx, h2, res, y2, c2);
  m.backward_residual(ctx, dy, dres, dx2, c2);
  CHECK(bits(h, h2));
  CHECK(bits(y, y2));
  CHECK(bits(dx, dx2));
  CHECK(std::memcmp(n.weight.grad(), m.weight.grad(), 48 * sizeof(float)) == 0);
  CHECK(c2.x == &h2);  // backward's input is the sum
  // forward_again: y from the kept input and rstd, the same bits.
  tensor<float> y3;
  m.forward_again(ctx, y3, c2);
  CHECK(bits(y3, y2));

  // In bf16 the sums round once to bf16 before the norm reads them, and the input
  // gradient twice (the norm's, then with the residual's), as the two passes did.
  using strata::bf16;
  namespace d = strata::nn::detail;
  const std::int64_t rows = 21, dim = 48;
  std::vector<bf16> hb(x.numel()), rb(x.numel()), yb(x.numel()), hb2, yb2(x.numel()), gb(x.numel()), drb(x.numel()),
      dxb(x.numel()), dxb2(x.numel());
  for (std::size_t i = 0; i < x.numel(); ++i) {
    hb[i] = bf16(x[i]), rb[i] = bf16(res[i]), gb[i] = bf16(dy[i]), drb[i] = bf16(dres[i]);
  }
  hb2 = hb;
  std::vector<float> rstd(rows), rstd2(rows);
  using ops = strata::ops<strata::host>;
  const strata::executor<strata::host> exec{};
  ops::add_into(exec, static_cast<std::int64_t>(hb.size()), hb.data(), rb.data());
  ops::rows(exec, rows, dim,
            d::rms_norm_forward_fn<float, bf16>{hb.data(), n.weight.data(), yb.data(), rstd.data(), dim, 1e-6});
  ops::rows(exec, rows, dim,
            d::rms_norm_forward_fn<float, bf16, true>{hb2.data(), n.weight.data(), yb2.data(), rstd2.data(), dim, 1e-6,
                                                      rb.data()});
  CHECK(std::memcmp(hb.data(), hb2.data(), hb.size() * sizeof(bf16)) == 0);
  CHECK(std::memcmp(yb.data(), yb2.data(), yb.size() * sizeof(bf16)) == 0);
  CHECK(rstd == rstd2);
  std::vector<bf16> yb3(x.numel());
  ops::rows(exec, rows, dim,
            d::rms_norm_apply_fn<float, bf16>{hb.data(), n.weight.data(), rstd.data(), yb3.data(), dim});
  CHECK(std::memcmp(yb.data(), yb3.data(), yb.size() * sizeof(bf16)) == 0);  // forward_again's pass
  ops::rows(exec, rows, dim,
            d::rms_norm_backward_fn<float, bf16>{hb.data(), gb.data(), n.weight.data(), rstd.data(), dxb.data(), dim});
  ops::add_into(exec, static_cast<std::int64_t>(dxb.size()), dxb.data(), drb.data());
  ops::rows(exec, rows, dim,
            d::rms_norm_backward_fn<float, bf16, true>{hb.data(), gb.data(), n.weight.data(), rstd.data(), dxb2.data(),
                                                       dim, drb.data()});
  CHECK(std::memcmp(dxb.data(), dxb2.data(), dxb.size() * sizeof(bf16)) == 0);

  // A residual of another shape is refused, naming the layer.
  m.weight.name = "layers.1.post_attention_layernorm.weight";
  const auto other = random_tensor(shape{3, 6, 48}, rng);
  const auto msg = message_of<strata::config_error>([&] { m.forward_residual(ctx, h2, other, y2, c2); });
  CHECK_CONTAINS(msg,
                 "rms_norm layers.1.post_attention_layernorm: the residual has shape [3, 6, 48], expected [3, 7, 48]");
}
