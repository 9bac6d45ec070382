// nn::softmax_cross_entropy and nn::mse: the loss against a double reference, stability
// with large logits, finite differences with an upstream scale, and bad targets.
// nn::linear_cross_entropy (the fused head and loss) against the head and loss apart.
#include <strata/nn/linear.hpp>
#include <strata/nn/mse.hpp>
#include <strata/nn/softmax_cross_entropy.hpp>
#include <strata/nn/tp/linear_cross_entropy.hpp>

#include "support.hpp"

using namespace nn_test;
namespace nn = strata::nn;

namespace {

// Mean over rows of logsumexp(x_r) - x_r[t_r], in double with the max subtracted.
double ce_reference(const tensor<float>& x, const tensor<float>& t) {
  const auto c = x.dim(x.shape().rank - 1);
  const auto rows = static_cast<std::int64_t>(t.numel());
  double total = 0.0;
  for (std::int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0.0;
    for (std::int64_t j = 0; j < c; ++j) m = std::max(m, static_cast<double>(x[r * c + j]));
    for (std::int64_t j = 0; j < c; ++j) s += std::exp(x[r * c + j] - m);
    total += m + std::log(s) - x[r * c + static_cast<std::int64_t>(t[r])];
  }
  return total / rows;
}

tensor<float> random_classes(const shape& s, int classes, std::mt19937& rng) {
  tensor<float> t(s);
  std::uniform_int_distribution<int> u(0, classes - 1);
  for (auto& v : t.span()) v = static_cast<float>(u(rng));
  return t;
}

}  // namespace

TEST_CASE("softmax_cross_entropy forward matches a double reference") {
  std::mt19937 rng(40);
  const nn::softmax_cross_entropy ce;
  nn::softmax_cross_entropy::cache c;
  tensor<float> y;
  context ctx;
  for (const auto& s : {shape{6, 10}, shape{2, 3, 7}, shape{300, 250}}) {
    const auto x = random_tensor(s, rng, -3.0f, 3.0f);
    shape lead = s;
    --lead.rank;
    ctx.t = random_classes(lead, static_cast<int>(s[s.rank - 1]), rng);
    ce.forward(ctx, x, y, c);
    REQUIRE(y.shape() == shape{1});
    // Each row's loss is log(sum) + (m - x_t), with float exps (a few ulp each) summed
    // in double: a relative 1e-6 of the loss, a few units of 2^-24 times log(C) + 6.
    CHECK_REL(y[0], ce_reference(x, ctx.t), 1e-6);
  }
}

TEST_CASE("softmax_cross_entropy is stable for large logits") {
  nn::softmax_cross_entropy ce;
  nn::softmax_cross_entropy::cache c;
  tensor<float> y, dx;
  context ctx;
  // exp(1e4) overflows float and double alike; only a max-subtracted form survives.
  const auto x = tensor_of(shape{2, 3}, {1e4f, 1e4f - 2.0f, -1e4f, -3e4f, -3e4f + 1.0f, -3e4f + 1.0f});
  ctx.t = tensor_of(shape{2}, {1, 0});
  ce.forward(ctx, x, y, c);
  REQUIRE(std::isfinite(y[0]));
  // Row 0: log(1 + e^-2 + e^-2e4) + 2; row 1: log(1 + 2e) - 0 + ... in closed form.
  const double row0 = std::log(1.0 + std::exp(-2.0)) + 2.0;
  const double row1 = std::log(1.0 + 2.0 * std::exp(1.0));
  CHECK_REL(y[0], (row0 + row1) / 2, 1e-6);

  // Softmax is shift invariant: the same loss and gradient after adding 5e3 to row 0.
  ce.backward(ctx, tensor_of(shape{1}, {1.0f}), dx, c);
  auto shifted = tensor_of(shape{2, 3}, {1.5e4f, 1.5e4f - 2.0f, -5e3f, -3e4f, -3e4f + 1.0f, -3e4f + 1.0f});
  nn::softmax_cross_entropy::cache c2;
  tensor<float> y2, dx2;
  ce.forward(ctx, shifted, y2, c2);
  ce.backward(ctx, tensor_of(shape{1}, {1.0f}), dx2, c2);
  CHECK_REL(y2[0], y[0], 1e-6);
  for (std::size_t i = 0; i < dx.numel(); ++i) {
    REQUIRE(std::isfinite(dx[i]));
    CHECK_ABS(dx2[i], dx[i], 1e-6);
  }
  // (p - onehot) / rows: each row of the gradient sums to zero, p(target row 0) = 1/(1+e^2).
  CHECK_ABS(dx[0] + dx[1] + dx[2], 0.0, 1e-7);
  CHECK_REL(dx[1], (1.0 / (1.0 + std::exp(2.0)) - 1.0) / 2, 1e-5);
}

TEST_CASE("softmax_cross_entropy backward matches finite differences, scaled by dy") {
  std::mt19937 rng(41);
  nn::softmax_cross_entropy ce;
  context ctx;
  auto x = random_tensor(shape{4, 7}, rng, -2.0f, 2.0f);
  ctx.t = random_classes(shape{4}, 7, rng);
  // dy is random in [0.25, 1): the upstream scale (1 / micro-batches) is honoured.
  // The output is one float of order 2 (rounding ~2.4e-7), which h = 2^-7 turns into
  // 3e-5: 1e-4 absolute is under 1% of a typical gradient here (p / rows * dy ~ 2e-2).
  check_gradients(ce, ctx, x, {}, rng, {.abs_tol = 1e-4});
  auto x3 = random_tensor(shape{2, 3, 5}, rng, -2.0f, 2.0f);
  ctx.t = random_classes(shape{2, 3}, 5, rng);
  check_gradients(ce, ctx, x3, {}, rng, {.abs_tol = 1e-4});
}

TEST_CASE("softmax_cross_entropy backward on the threaded path equals the closed form") {
  // With 64 x 600 logits single gradients (~3e-5) are below what a float loss can
  // resolve by finite differences, so compare with dy * (softmax - onehot) / rows in double.
  std::mt19937 rng(43);
  nn::softmax_cross_entropy ce;
  context ctx;
  const auto x = random_tensor(shape{64, 600}, rng, -4.0f, 4.0f);
  ctx.t = random_classes(shape{64}, 600, rng);
  nn::softmax_cross_entropy::cache c;
  tensor<float> y, dx;
  ce.forward(ctx, x, y, c);
  const float scale = 0.375f;
  ce.backward(ctx, tensor_of(shape{1}, {scale}), dx, c);
  for (std::int64_t r = 0; r < 64; ++r) {
    double m = -INFINITY, s = 0.0;
    for (std::int64_t j = 0; j < 600; ++j) m = std::max(m, double(x[r * 600 + j]));
    for (std::int64_t j = 0; j < 600; ++j) s += std::exp(x[r * 600 + j] - m);
    for (std::int64_t j = 0; j < 600; ++j) {
      const double p = std::exp(x[r * 600 + j] - m) / s;
      const double want = scale * (p - (j == static_cast<std::int64_t>(ctx.t[r]) ? 1.0 : 0.0)) / 64;
      // float exp and the float log-sum are good to a few ulp: 1e-5 relative is ample.
      REQUIRE(std::abs(dx[r * 600 + j] - want) <= 1e-5 * std::abs(want) + 1e-12);
    }
  }
  check_no_allocation(ce, ctx, x, rng);
}

TEST_CASE("softmax_cross_entropy: bad targets name the row and the class count") {
  const nn::softmax_cross_entropy ce;
  nn::softmax_cross_entropy::cache c;
  tensor<float> y;
  context ctx;
  const tensor<float> x(shape{3, 4});
  ctx.t = tensor_of(shape{3}, {0, 4, 1});
  auto msg = message_of<strata::error>([&] { ce.forward(ctx, x, y, c); });
  CHECK_CONTAINS(msg, "target 4 at row 1 is not a class id in [0, 4) nor ignore_label (-100)");
  ctx.t = tensor_of(shape{2}, {0, 1});
  msg = message_of<strata::config_error>([&] { ce.forward(ctx, x, y, c); });
  CHECK_CONTAINS(msg, "targets have shape [2] for logits [3, 4]; expected one class id per row, shape [3]");
}

TEST_CASE("mse: forward, finite differences, reuse, bad targets") {
  std::mt19937 rng(42);
  nn::mse loss;
  context ctx;
  nn::mse::cache c;
  tensor<float> y;
  auto x = random_tensor(shape{5, 3}, rng);
  ctx.t = random_tensor(shape{5, 3}, rng);
  loss.forward(ctx, x, y, c);
  double ref = 0.0;
  for (std::size_t i = 0; i < x.numel(); ++i) ref += (double(x[i]) - ctx.t[i]) * (double(x[i]) - ctx.t[i]);
  // x - t rounds once in float (2^-24 relative), the rest is double.
  CHECK_REL(y[0], ref / x.numel(), 1e-6);
  // One float output of order 1: see the cross-entropy budget above.
  check_gradients(loss, ctx, x, {}, rng, {.abs_tol = 1e-4});

  // Threaded path: gradients of ~1e-5 each, so the closed form 2 dy (x - t) / n instead.
  auto big = random_tensor(shape{256, 200}, rng);
  ctx.t = random_tensor(shape{256, 200}, rng);
  tensor<float> dx;
  loss.forward(ctx, big, y, c);
  loss.backward(ctx, tensor_of(shape{1}, {0.5f}), dx, c);
  for (std::size_t i = 0; i < big.numel(); ++i) {
    const double want = 2.0 * 0.5 * (double(big[i]) - ctx.t[i]) / big.numel();
    REQUIRE(std::abs(dx[i] - want) <= 1e-6 * std::abs(want) + 1e-12);
  }
  check_no_allocation(loss, ctx, big, rng);

  ctx.t = tensor<float>(shape{5});
  const auto msg = message_of<strata::config_error>([&] { loss.forward(ctx, x, y, c); });
  CHECK_CONTAINS(msg, "mse: targets have shape [5], the input has [5, 3]; they must match");
}

namespace {
// A trainer's context as the losses see it: targets and the step's label count.
struct counted_context : context {
  double count = -1;
  double label_count() const { return count; }
};
}  // namespace

TEST_CASE("cross-entropy: ignore_label rows add nothing, and a context's label count divides the sum") {
  std::mt19937 rng(11);
  const tensor<float> x = random_tensor(shape{4, 6}, rng, -3.0f, 3.0f);
  const float ig = strata::ignore_label;
  const auto t = [&] { return tensor_of(shape{4}, {2, ig, 5, ig}); };
  // The same two labels without the ignored rows: the reference loss and gradient.
  tensor<float> x2(shape{2, 6});
  for (std::int64_t j = 0; j < 6; ++j) x2[j] = x[j], x2[6 + j] = x[12 + j];
  const auto t2 = [] { return tensor_of(shape{2}, {2, 5}); };

  const auto check = [&](auto& ce, auto& c, auto& c2) {
    counted_context ctx;
    ctx.t = t();
    ctx.count = 2;  // two labels are not ignored
    tensor<float> y, y2, dx, dx2;
    ce.forward(ctx, x, y, c);
    CHECK_REL(y[0], ce_reference(x2, t2()), 1e-6);
    ce.backward(ctx, tensor_of(shape{1}, {0.5f}), dx, c);
    context plain;
    plain.t = t2();
    ce.forward(plain, x2, y2, c2);
    CHECK(y[0] == y2[0]);
    ce.backward(plain, tensor_of(shape{1}, {0.5f}), dx2, c2);
    for (std::int64_t j = 0; j < 6; ++j) {
      CHECK(dx[j] == dx2[j]);
      CHECK(dx[12 + j] == dx2[6 + j]);
      CHECK(dx[6 + j] == 0.0f);
      CHECK(dx[18 + j] == 0.0f);
    }
    // Without a count the mean is over all rows, the ignored ones adding 0.
    plain.t = t();
    ce.forward(plain, x, y, c);
    CHECK_REL(y[0], ce_reference(x2, t2()) / 2, 1e-6);
    // Every label ignored: loss 0, gradient 0 (no 0/0).
    ctx.t = tensor_of(shape{4}, {ig, ig, ig, ig});
    ctx.count = 0;
    ce.forward(ctx, x, y, c);
    CHECK(y[0] == 0.0f);
    ce.backward(ctx, tensor_of(shape{1}, {1.0f}), dx, c);
    for (float v : dx.span()) CHECK(v == 0.0f);
    // Other negative values are still bad targets.
    ctx.t = tensor_of(shape{4}, {2, -1, 5, ig});
    CHECK_CONTAINS(message_of<strata::error>([&] { ce.forward(ctx, x, y, c); }),
                   "target -1 at row 1 is not a class id in [0, 6) nor ignore_label (-100)");
  };
  SECTION("softmax_cross_entropy") {
    nn::softmax_cross_entropy ce;
    nn::softmax_cross_entropy::cache c, c2;
    check(ce, c, c2);
  }
}

TEST_CASE("linear_cross_entropy equals a linear head and softmax_cross_entropy, in chunks of any size") {
  std::mt19937 rng(71);
  constexpr int D = 12, V = 40;
  const float ig = static_cast<float>(strata::ignore_label);
  // Unfused: logits = x W^T, then the loss; the weight is bound to the same values.
  nn::linear head = nn::make_linear(D, V, false);
  param_store store;
  store.bind(head.weight, rng, -0.5f, 0.5f);
  const auto x = random_tensor(shape{3, 7, D}, rng, -2.0f, 2.0f);  // 21 rows
  context ctx;
  ctx.t = random_classes(shape{3, 7}, V, rng);
  ctx.t[4] = ig;
  ctx.t[20] = ig;
  const auto dy = tensor_of(shape{1}, {0.75f});
  nn::linear::cache<> ch;
  nn::softmax_cross_entropy ce;
  nn::softmax_cross_entropy::cache<> cc;
  tensor<float> logits, y0, dlogits, dx0;
  head.forward(ctx, x, logits, ch);
  ce.forward(ctx, logits, y0, cc);
  ce.backward(ctx, dy, dlogits, cc);
  head.backward(ctx, dlogits, dx0, ch);
  const std::vector<float> dw0(head.weight.grads().begin(), head.weight.grads().end());
  const auto close = [](std::span<const float> got, std::span<const float> want, double rel) {
    REQUIRE(got.size() == want.size());
    double scale = 0, worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::abs(static_cast<double>(want[i])));
      worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    }
    INFO("max |difference| " << worst << " of largest " << scale);
    CHECK(worst <= rel * scale);
  };

  // 0: every row in one chunk, the unfused arithmetic exactly; 1 element: a row a chunk;
  // 3 rows (ragged: 21 = 7 x 3); 8 rows (a ragged last chunk of 5).
  for (const std::int64_t chunk : {std::int64_t{0}, std::int64_t{1}, std::int64_t{3 * V}, std::int64_t{8 * V}}) {
    INFO("chunk_elements " << chunk);
    auto fused = nn::make_linear_cross_entropy(D, V, 0, 1, chunk);
    fused.weight.data_ptr = head.weight.data_ptr;
    std::vector<float> grad(fused.weight.numel(), 0.0f);
    fused.weight.grad_ptr = grad.data();
    nn::linear_cross_entropy::cache<> c;
    tensor<float> y, dx;
    fused.forward(ctx, x, y, c);
    fused.backward(ctx, dy, dx, c);
    CHECK(c.logits.numel() == static_cast<std::size_t>(fused.chunk_rows(21) * V));
    if (chunk == 0) {
      // The same GEMMs and row functors on the same rows: the same bits.
      CHECK(y[0] == y0[0]);
      CHECK(std::equal(dx.span().begin(), dx.span().end(), dx0.span().begin()));
      CHECK(std::equal(grad.begin(), grad.end(), dw0.begin()));
    } else {
      // Chunks change only the order the weight's gradient sums rows in (and the GEMMs'
      // blocking): float rounding of sums of 21 terms, far inside 1e-5 of the largest.
      CHECK_REL(y[0], y0[0], 1e-6);
      close(dx.span(), dx0.span(), 1e-5);
      close(grad, dw0, 1e-5);
    }
    // Ignored rows have no gradient.
    for (std::int64_t j = 0; j < D; ++j) CHECK(dx[4 * D + j] == 0.0f);
    // A second pass of the same shape allocates nothing, and accumulates into the grad.
    const long before = g_heap_allocations.load();
    fused.forward(ctx, x, y, c);
    fused.backward(ctx, dy, dx, c);
    CHECK(g_heap_allocations.load() == before);
    std::vector<float> twice(dw0.size());
    for (std::size_t i = 0; i < twice.size(); ++i) twice[i] = 2.0f * dw0[i];
    close(grad, twice, 1e-5);

    tensor<float> l;
    fused.logits(ctx, x, l);
    CHECK(l.shape() == logits.shape());
    CHECK(std::equal(l.span().begin(), l.span().end(), logits.span().begin()));
  }
}

TEST_CASE("linear_cross_entropy refuses what does not fit, naming it") {
  std::mt19937 rng(72);
  auto fused = nn::make_linear_cross_entropy(4, 10, 0, 1);
  param_store store;
  store.bind(fused.weight, rng);
  fused.weight.name = "lm_head.weight";
  nn::linear_cross_entropy::cache<> c;
  tensor<float> y, dx;
  context ctx;
  const auto x = random_tensor(shape{2, 3, 4}, rng);
  ctx.t = tensor_of(shape{2, 3}, {1, 2, 3, 10, 0, 0});
  CHECK_CONTAINS(message_of<strata::error>([&] { fused.forward(ctx, x, y, c); }),
                 "target 10 at row 3 is not a class id in [0, 10)");
  ctx.t = random_classes(shape{6}, 10, rng);
  CHECK_CONTAINS(message_of<strata::config_error>([&] { fused.forward(ctx, x, y, c); }),
                 "targets have shape [6] for hidden states [2, 3, 4]");
  ctx.t = random_classes(shape{2, 3}, 10, rng);
  CHECK_CONTAINS(message_of<strata::config_error>([&] { fused.forward(ctx, random_tensor(shape{6, 5}, rng), y, c); }),
                 "linear_cross_entropy lm_head: input has 5 features, weight expects 4");
  CHECK_CONTAINS(message_of<strata::config_error>([&] { fused.backward(ctx, tensor_of(shape{1}, {1.0f}), dx, c); }),
                 "backward called with a cache that no forward filled");
  CHECK_CONTAINS(message_of<strata::config_error>([] { nn::make_linear_cross_entropy(4, 10, 0, 4); }),
                 "linear_cross_entropy: 10 vocabulary entries do not divide over 4");
}
