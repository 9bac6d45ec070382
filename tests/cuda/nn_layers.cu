// strata-gpu: required
// The nn layers in the CUDA space against the same layers on the host, on the same data:
// linear (cuBLAS), relu, gelu (erf and tanh forms), softmax cross-entropy and mse, forward
// and backward; the bad-target error; the same bits run to run; no allocation on reuse;
// column sums by the host's row chunks and scatters in token order, bit for bit; GEMMs
// on 16-bit operands (tensor cores) against the exact product of the rounded operands.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <strata/nn/gelu.hpp>
#include <strata/nn/linear.hpp>
#include <strata/nn/mse.hpp>
#include <strata/nn/relu.hpp>
#include <strata/nn/softmax_cross_entropy.hpp>
#include <strata/space/cuda_ops.cuh>
#include <strata/space/host_ops.hpp>
#include <string>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "support/device_layers.hpp"

namespace {

using namespace strata_test;
namespace nn = strata::nn;
using device_ctx = strata::context<strata::cuda, strata::self_comm>;

struct device_env {
  device_executor exec;
  device_ctx ctx;
  device_env() { ctx.set_exec(exec.get()); }
};

// run(exec) -> a device tensor, with the executor's scratch and then with none (the
// reductions' stream-ordered memory of their own): the host's bits either way.
template <class Run>
void check_with_and_without_scratch(const std::vector<float>& expected, Run&& run) {
  for (int pass = 0; pass < 2; ++pass) {
    const bool with_scratch = pass == 0;
    INFO((with_scratch ? "the executor's scratch" : "no scratch: stream-ordered memory of its own"));
    device_env env;
    auto exec = env.exec.get();
    if (!with_scratch) exec.scratch = nullptr;
    const device_tensor out = run(exec);
    env.exec.synchronize();
    CHECK(same_bits(read(out), expected));
  }
}

// A forward and backward of `layer` on both spaces from the same x and dy.
struct elementwise_result {
  std::vector<float> x, y_host, y_device, dy, dx_host, dx_device;
};
template <class Layer>
elementwise_result run_elementwise(const Layer& layer, const shape& s, float lo, float hi, std::mt19937& rng) {
  elementwise_result r;
  r.x = random_values(s.numel(), rng, lo, hi);
  for (std::size_t i = 0; i < r.x.size(); i += 101) r.x[i] = 0.0f;  // the kink of relu
  r.dy = random_values(s.numel(), rng);
  Layer h = layer, d = layer;
  host_ctx hctx;
  const host_tensor hx = host_of(s, r.x), hdy = host_of(s, r.dy);
  host_tensor hy, hdx;
  typename Layer::template cache<strata::host> hc;
  h.forward(hctx, hx, hy, hc);
  h.backward(hctx, hdy, hdx, hc);
  device_env env;
  const device_tensor dx_in = device_of(s, r.x), ddy = device_of(s, r.dy);
  device_tensor dy_out, ddx;
  typename Layer::template cache<strata::cuda> dc;
  d.forward(env.ctx, dx_in, dy_out, dc);
  d.backward(env.ctx, ddy, ddx, dc);
  env.exec.synchronize();
  REQUIRE(dy_out.shape() == hy.shape());
  REQUIRE(ddx.shape() == hdx.shape());
  r.y_host = values_of(hy);
  r.y_device = read(dy_out);
  r.dx_host = values_of(hdx);
  r.dx_device = read(ddx);
  return r;
}

}  // namespace

TEST_CASE("linear: cuBLAS forward and backward match the host layer") {
  for (const bool with_bias : {true, false}) {
    INFO("bias: " << with_bias);
    std::mt19937 rng(11);
    const std::int64_t in = 48, out = 40, batch = 5, seq = 7, rows = batch * seq;
    nn::linear h = nn::make_linear(in, out, with_bias);
    const auto w = random_values(h.weight.numel(), rng), b = random_values(h.bias.numel(), rng);
    // Non-zero starting gradients: backward must add to them (beta = 1, +=).
    const auto gw0 = random_values(h.weight.numel(), rng), gb0 = random_values(h.bias.numel(), rng);
    std::vector<float> hw = w, hb = b, hgw = gw0, hgb = gb0;
    h.weight.data_ptr = hw.data();
    h.weight.grad_ptr = hgw.data();
    h.bias.data_ptr = with_bias ? hb.data() : nullptr;
    h.bias.grad_ptr = with_bias ? hgb.data() : nullptr;
    nn::linear d = h;
    device_params store;
    store.bind(d.weight, w, gw0);
    store.bind(d.bias, b, gb0);

    const auto x = random_values(rows * in, rng), dy = random_values(rows * out, rng);
    host_ctx hctx;
    const host_tensor hx = host_of({batch, seq, in}, x), hdy = host_of({batch, seq, out}, dy);
    host_tensor hy, hdx;
    nn::linear::cache hc;
    h.forward(hctx, hx, hy, hc);
    h.backward(hctx, hdy, hdx, hc);

    device_env env;
    const device_tensor dx_in = device_of({batch, seq, in}, x), ddy = device_of({batch, seq, out}, dy);
    device_tensor dy_out, ddx;
    nn::linear::cache<strata::cuda> dc;
    d.forward(env.ctx, dx_in, dy_out, dc);
    d.backward(env.ctx, ddy, ddx, dc);
    env.exec.synchronize();
    REQUIRE(dy_out.shape() == hy.shape());
    REQUIRE(ddx.shape() == hdx.shape());

    // Each side's float dot product of K terms is within K u sum|terms| of the exact one,
    // whatever order BLAS or cuBLAS sums in, so the two differ by at most 2 K u sum|terms|:
    // below 1e-5 sum|terms| for every K here (48, 40 and 35; 2 K u < 1e-5 up to K = 83).
    constexpr double rel = 1e-5;
    const auto y = read(dy_out);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t o = 0; o < out; ++o) {
        double scale = with_bias ? std::abs(b[o]) : 0.0;
        for (std::int64_t i = 0; i < in; ++i) scale += std::abs(static_cast<double>(x[r * in + i]) * w[o * in + i]);
        require_close("y", r * out + o, y[r * out + o], hy[r * out + o], rel * scale);
      }
    const auto dxv = read(ddx);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = 0; i < in; ++i) {
        double scale = 0.0;
        for (std::int64_t o = 0; o < out; ++o) scale += std::abs(static_cast<double>(dy[r * out + o]) * w[o * in + i]);
        require_close("dx", r * in + i, dxv[r * in + i], hdx[r * in + i], rel * scale);
      }
    const auto gw = read(d.weight.grad(), d.weight.numel());
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t i = 0; i < in; ++i) {
        double scale = std::abs(gw0[o * in + i]);
        for (std::int64_t r = 0; r < rows; ++r) scale += std::abs(static_cast<double>(dy[r * out + o]) * x[r * in + i]);
        require_close("weight.grad", o * in + i, gw[o * in + i], hgw[o * in + i], rel * scale);
      }
    // The bias gradient sums each column by the same row chunks, in double, on both sides.
    if (with_bias) CHECK(same_bits(read(d.bias.grad(), d.bias.numel()), hgb));
  }
}

// mixed<bf16|fp16> on a GPU: GEMM operands rounded to 16 bits (RNE, the compute params'
// own rounding) and multiplied on tensor cores. A product of two 16-bit values is exact
// in fp32, so the result is the exact product of the rounded operands up to fp32
// accumulation: within k x 2^-23 of sum |a b| (twice the textbook k u, for tensor cores
// that truncate inside their adders). Unrounded operands would miss that by up to 2^-8
// relative, so the bound also shows the rounding happened. Every transpose, a leading
// dimension wider than the matrix, a strided batch, alpha and beta, and a B given in 16
// bits (a mixed trainer's weight).
template <class T>
void check_16bit_gemm(strata::gemm_operands kind) {
  std::mt19937 rng(41);
  const std::int64_t m = 37, n = 45, k = 61, pad = 3, batch = 3;
  for (auto ta : {strata::transpose::no, strata::transpose::yes})
    for (auto tb : {strata::transpose::no, strata::transpose::yes})
      for (bool scratch : {true, false}) {
        INFO("ta " << (ta == strata::transpose::yes) << ", tb " << (tb == strata::transpose::yes) << ", scratch "
                   << scratch);
        const std::int64_t a_rows = ta == strata::transpose::yes ? k : m, a_cols = ta == strata::transpose::yes ? m : k;
        const std::int64_t b_rows = tb == strata::transpose::yes ? n : k, b_cols = tb == strata::transpose::yes ? k : n;
        const std::int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = n + pad;
        const std::int64_t sa = a_rows * lda + 5, sb = b_rows * ldb + 7, sc = m * ldc + 2;
        const auto a = random_values(static_cast<std::size_t>(sa * batch), rng, -2.0f, 2.0f);
        const auto b = random_values(static_cast<std::size_t>(sb * batch), rng, -2.0f, 2.0f);
        const auto c0 = random_values(static_cast<std::size_t>(sc * batch), rng);
        const float alpha = 0.75f, beta = -0.5f;
        device_env env;
        auto exec = env.exec.get();
        exec.gemm = kind;
        if (!scratch) exec.scratch = nullptr;
        const device_tensor da = device_of({sa * batch}, a), db = device_of({sb * batch}, b);
        device_tensor one = device_of({sc * batch}, c0), many = device_of({sc * batch}, c0);
        device_tensor typed = device_of({sc * batch}, c0);
        strata::ops<strata::cuda>::gemm(exec, ta, tb, m, n, k, alpha, da.data(), lda, db.data(), ldb, beta, one.data(),
                                        ldc);
        // B already 16-bit (a mixed trainer's weights): read as stored, at its own ldb.
        std::vector<T> b16(static_cast<std::size_t>(sb));
        for (std::size_t i = 0; i < b16.size(); ++i) b16[i] = T(b[i]);
        strata::cuda_buffer<T> db16(b16.size());
        strata::cuda::copy(db16.data(), b16.data(), db16.bytes());
        strata::ops<strata::cuda>::gemm(exec, ta, tb, m, n, k, alpha, da.data(), lda,
                                        static_cast<const T*>(db16.data()), ldb, beta, typed.data(), ldc);
        strata::ops<strata::cuda>::gemm_strided_batched(exec, ta, tb, m, n, k, alpha, da.data(), lda, sa, db.data(),
                                                        ldb, sb, beta, many.data(), ldc, sc, batch);
        env.exec.synchronize();
        const auto got_one = read(one), got_many = read(many), got_typed = read(typed);
        const auto r = [](float v) { return static_cast<double>(static_cast<float>(T(v))); };
        double missed_by_fp32 = 0;  // how far the unrounded product is from the result
        for (std::int64_t q = 0; q < batch; ++q)
          for (std::int64_t i = 0; i < m; ++i)
            for (std::int64_t j = 0; j < n; ++j) {
              double exact = 0, magnitude = 0, unrounded = 0;
              for (std::int64_t p = 0; p < k; ++p) {
                const float av =
                    a[static_cast<std::size_t>(q * sa + (ta == strata::transpose::yes ? p * lda + i : i * lda + p))];
                const float bv =
                    b[static_cast<std::size_t>(q * sb + (tb == strata::transpose::yes ? j * ldb + p : p * ldb + j))];
                exact += r(av) * r(bv);
                magnitude += std::abs(r(av) * r(bv));
                unrounded += static_cast<double>(av) * bv;
              }
              const std::size_t at = static_cast<std::size_t>(q * sc + i * ldc + j);
              const double want = alpha * exact + beta * static_cast<double>(c0[at]);
              const double tol = std::abs(alpha) * magnitude * static_cast<double>(k) * std::ldexp(1.0, -23) +
                                 std::abs(want) * std::ldexp(1.0, -23);
              require_close("batched", at, got_many[at], want, tol);
              if (q == 0) require_close("single", at, got_one[at], want, tol);
              if (q == 0) require_close("16-bit B", at, got_typed[at], want, tol);
              missed_by_fp32 =
                  std::max(missed_by_fp32, std::abs(alpha * unrounded + beta * c0[at] - want) / (tol > 0 ? tol : 1));
            }
        CHECK(missed_by_fp32 > 1.0);
        // Beyond each matrix (the padding of ldc, the gap between batch matrices), C is untouched.
        for (std::int64_t at = 0; at < sc * batch; ++at) {
          const std::int64_t in_matrix = at % sc;
          if (in_matrix < m * ldc && in_matrix % ldc < n) continue;
          CHECK(got_many[static_cast<std::size_t>(at)] == c0[static_cast<std::size_t>(at)]);
        }
      }
}

TEST_CASE("16-bit GEMM operands: tensor cores give the exact product of the rounded operands") {
  SECTION("bf16") { check_16bit_gemm<strata::bf16>(strata::gemm_operands::bf16); }
  SECTION("fp16") { check_16bit_gemm<strata::fp16>(strata::gemm_operands::fp16); }
}

TEST_CASE("add_column_sums: the device adds the host's row chunks in the host's order") {
  std::mt19937 rng(31);
  // One chunk, five (the last of one row), and bias-gradient size (64 chunks x 768).
  for (const auto& size : {std::pair<std::int64_t, std::int64_t>{100, 130}, {513, 130}, {8192, 768}}) {
    const std::int64_t rows = size.first, cols = size.second;
    INFO(rows << " x " << cols);
    auto x = random_values(static_cast<std::size_t>(rows * cols), rng, -3.0f, 3.0f);
    // Column 0 sums to 128 by chunks and to 255 in row order (tests/unit/space/ops.cpp).
    const std::int64_t chunk = strata::detail::column_chunk_rows;
    for (std::int64_t i = 0; i < rows; ++i) x[i * cols] = i == chunk - 1 ? 1e17f : i == chunk ? -1e17f : 1.0f;
    const auto start = random_values(static_cast<std::size_t>(cols), rng);
    std::vector<float> host = start;
    strata::ops<strata::host>::add_column_sums({}, rows, cols, nn::detail::matrix_term{x.data(), cols}, host.data());
    const device_tensor dx = device_of({rows, cols}, x);
    check_with_and_without_scratch(host, [&](const strata::executor<strata::cuda>& exec) {
      device_tensor out = device_of({cols}, start);
      strata::ops<strata::cuda>::add_column_sums(exec, rows, cols, nn::detail::matrix_term{dx.data(), cols},
                                                 out.data());
      return out;
    });
  }
}

namespace {
struct vector_term {
  const float* v;
  STRATA_HOST_DEVICE float operator()(std::int64_t i) const { return v[i]; }
};
}  // namespace

// Past one chunk the device cuts the terms into chunks of detail::mean_chunk, one block
// each. Multiples of 2^-10 below 2^10 sum exactly in double in any order, so every order
// must give the host's bits; a lost or doubled chunk moves the mean.
TEST_CASE("mean: many blocks give the host's mean") {
  std::mt19937 rng(41);
  std::uniform_int_distribution<int> q(-1 << 20, 1 << 20);
  const std::int64_t chunk = strata::detail::mean_chunk;
  for (const std::int64_t n : {std::int64_t{1000}, chunk, 3 * chunk + 5, 40 * chunk}) {
    INFO("n " << n);
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = static_cast<float>(q(rng)) / 1024.0f;
    const double count = static_cast<double>(n) / 2;  // a masked loss divides by fewer than n
    std::vector<float> host(1);
    strata::ops<strata::host>::mean({}, n, vector_term{v.data()}, count, host.data());
    const device_tensor dv = device_of({n}, v);
    check_with_and_without_scratch(host, [&](const strata::executor<strata::cuda>& exec) {
      device_tensor out = device_of({1}, {0.0f});
      strata::ops<strata::cuda>::mean(exec, n, vector_term{dv.data()}, count, out.data());
      return out;
    });
  }
}

TEST_CASE("scatter_add_rows: the device adds each row's tokens in token order, the host's bits") {
  std::mt19937 rng(37);
  // A table slice [lo, lo + local) of a 1000-id vocabulary: ids outside it are skipped;
  // id 250 takes a third of the tokens (a long run), the rest are spread out.
  const std::int64_t n = 8192, d = 300, lo = 200, local = 500;
  std::uniform_int_distribution<int> id(0, 999), coin(0, 2);
  std::vector<float> ids(n);
  for (auto& v : ids) v = static_cast<float>(coin(rng) == 0 ? 250 : id(rng));
  const auto src = random_values(static_cast<std::size_t>(n * d), rng);
  const auto start = random_values(static_cast<std::size_t>(local * d), rng);
  std::vector<float> host = start;
  strata::ops<strata::host>::scatter_add_rows({}, n, d, lo, local, ids.data(), src.data(), host.data());
  const device_tensor dids = device_of({n}, ids), dsrc = device_of({n, d}, src);
  check_with_and_without_scratch(host, [&](const strata::executor<strata::cuda>& exec) {
    device_tensor out = device_of({local, d}, start);
    strata::ops<strata::cuda>::scatter_add_rows(exec, n, d, lo, local, dids.data(), dsrc.data(), out.data());
    return out;
  });
}

TEST_CASE("relu: the device gives the host's bits") {
  std::mt19937 rng(3);
  const auto r = run_elementwise(nn::relu{}, shape{3, 1001, 17}, -1.0f, 1.0f, rng);
  CHECK(same_bits(r.y_device, r.y_host));
  CHECK(same_bits(r.dx_device, r.dx_host));
}

TEST_CASE("gelu: the device matches the host within a few roundings") {
  for (const auto approximate : {nn::gelu_approximation::none, nn::gelu_approximation::tanh}) {
    INFO("approximation: " << (approximate == nn::gelu_approximation::tanh ? "tanh" : "erf"));
    std::mt19937 rng(5);
    const auto r = run_elementwise(nn::gelu{approximate}, shape{7, 14293}, -6.0f, 6.0f, rng);
    // Both sides evaluate the same expression; only erf/tanh/exp come from different math
    // libraries, each within 2 ulp (CUDA's documented bound; glibc's is 1-2). An error e
    // in T = erf or tanh (|T| <= 1, so e <= 2 ulp(1) = 4u per side) moves y = x (1 + T) / 2
    // by |x| e / 2, and the derivative by at most |x| (1 + 0.14 x^2) e (from the tanh
    // form's x (1 - T^2) sqrt(2/pi) (1 + 3 0.044715 x^2) / 2 term; the erf form's is
    // smaller); plus a rounding of each result. 8u per unit of those bounds covers both
    // sides with a factor of two to spare.
    for (std::size_t i = 0; i < r.x.size(); ++i) {
      const double x = r.x[i];
      require_close("y", i, r.y_device[i], r.y_host[i], 8 * u * (std::abs(x) + std::abs(r.y_host[i])));
      const double slope = 1.0 + std::abs(x) * (1.0 + 0.14 * x * x);
      require_close("dx", i, r.dx_device[i], r.dx_host[i],
                    8 * u * (std::abs(r.dy[i]) * slope + std::abs(r.dx_host[i])));
    }
  }
}

TEST_CASE("softmax_cross_entropy: loss, caches and gradient match the host") {
  struct case_t {
    shape logits;
    float spread;
  };
  // Classes below and above the block size (256): one and several elements per thread.
  for (const auto& c : {case_t{{6, 37, 50}, 8.0f}, case_t{{3, 1000}, 20.0f}}) {
    INFO("logits " << c.logits);
    std::mt19937 rng(17);
    const auto classes = c.logits[c.logits.rank - 1];
    shape lead = c.logits;
    --lead.rank;
    const auto x = random_values(c.logits.numel(), rng, -c.spread, c.spread);
    std::vector<float> t(lead.numel());
    std::uniform_int_distribution<std::int64_t> pick(0, classes - 1);
    for (auto& v : t) v = static_cast<float>(pick(rng));
    const std::vector<float> dy = {0.75f};  // a loss scale, as the trainer seeds backward

    const nn::softmax_cross_entropy layer;
    host_ctx hctx;
    const host_tensor hx = host_of(c.logits, x), ht = host_of(lead, t), hdy = host_of({1}, dy);
    hctx.set_targets(&ht);
    host_tensor hy, hdx;
    nn::softmax_cross_entropy::cache hc;
    nn::softmax_cross_entropy hl = layer;
    hl.forward(hctx, hx, hy, hc);
    hl.backward(hctx, hdy, hdx, hc);

    device_env env;
    const device_tensor dx_in = device_of(c.logits, x), dt = device_of(lead, t), ddy = device_of({1}, dy);
    env.ctx.set_targets(&dt);
    device_tensor dy_out, ddx;
    nn::softmax_cross_entropy::cache<strata::cuda> dc;
    nn::softmax_cross_entropy dl = layer;
    dl.forward(env.ctx, dx_in, dy_out, dc);
    dl.backward(env.ctx, ddy, ddx, dc);
    env.exec.synchronize();

    // The loss is a mean of double row losses: only the summation order differs, far
    // below float resolution; 1e-6 allows a last-bit difference in the float result.
    REQUIRE(dy_out.shape() == hy.shape());
    const auto loss = read(dy_out);
    require_close("loss", 0, loss[0], hy[0], 1e-6 * std::abs(hy[0]));
    // The row max is exact, the target copied.
    CHECK(same_bits(read(dc.row_max), values_of(hc.row_max)));
    CHECK(same_bits(read(dc.target), values_of(hc.target)));
    // log(sum exp) in double, rounded to float: the sums' order may move the last bit.
    const auto ls = read(dc.log_sum);
    for (std::size_t r = 0; r < ls.size(); ++r)
      require_close("log_sum", r, ls[r], hc.log_sum[r], 2 * u * std::abs(hc.log_sum[r]));
    // dx = s exp(a) (- s at the target), a = (x - m) - l, s = dy / rows. x - m is exact on
    // both sides; l may differ by its last bit (2u |l|), which with a's own rounding moves
    // a by at most 2u (|l| + |a|), and exp(a) by that much relative; each side's exp is
    // within 2 ulp (4u) and two more roundings follow (times s, minus s). Twice that sum,
    // relative to |dx| + s since the target's term cancels down from s.
    const auto dxv = read(ddx);
    REQUIRE(ddx.shape() == hdx.shape());
    const double s = dy[0] / static_cast<double>(lead.numel());
    for (std::size_t i = 0; i < dxv.size(); ++i) {
      const auto r = i / static_cast<std::size_t>(classes);
      const double l = hc.log_sum[r], a = (x[i] - hc.row_max[r]) - l;
      require_close("dx", i, dxv[i], hdx[i], (4 * u * (std::abs(l) + std::abs(a)) + 16 * u) * (std::abs(hdx[i]) + s));
    }
  }
}

TEST_CASE("softmax_cross_entropy: a bad target throws the host's error, and reads nothing out of bounds") {
  std::mt19937 rng(19);
  const std::int64_t rows = 40, classes = 9;
  const auto x = random_values(rows * classes, rng);
  std::vector<float> t(rows, 1.0f);
  t[23] = 2.5f;
  t[11] = static_cast<float>(classes);  // the first bad row: both sides name row 11
  t[30] = -1.0f;

  const nn::softmax_cross_entropy layer;
  host_ctx hctx;
  const host_tensor hx = host_of({rows, classes}, x), ht = host_of({rows}, t);
  hctx.set_targets(&ht);
  host_tensor hy;
  nn::softmax_cross_entropy::cache hc;
  std::string host_message;
  try {
    layer.forward(hctx, hx, hy, hc);
  } catch (const strata::error& e) {
    host_message = e.what();
  }
  REQUIRE_FALSE(host_message.empty());

  device_env env;
  const device_tensor dx_in = device_of({rows, classes}, x), dt = device_of({rows}, t);
  env.ctx.set_targets(&dt);
  device_tensor dy_out;
  nn::softmax_cross_entropy::cache<strata::cuda> dc;
  std::string device_message;
  try {
    layer.forward(env.ctx, dx_in, dy_out, dc);
  } catch (const strata::error& e) {
    device_message = e.what();
  }
  CHECK(device_message == host_message);
  CHECK(device_message.find("target 9 at row 11 is not a class id in [0, 9)") != std::string::npos);

  // The stream is still usable, and good targets run.
  t[11] = t[23] = t[30] = 0.0f;
  const device_tensor good = device_of({rows}, t);
  env.ctx.set_targets(&good);
  layer.forward(env.ctx, dx_in, dy_out, dc);
  env.exec.synchronize();
  CHECK(std::isfinite(read(dy_out)[0]));
}

TEST_CASE("mse: loss and gradient match the host") {
  std::mt19937 rng(23);
  const shape s{16, 33};
  const auto x = random_values(s.numel(), rng), t = random_values(s.numel(), rng);
  const std::vector<float> dy = {0.5f};
  const nn::mse layer;

  host_ctx hctx;
  const host_tensor hx = host_of(s, x), ht = host_of(s, t), hdy = host_of({1}, dy);
  hctx.set_targets(&ht);
  host_tensor hy, hdx;
  nn::mse::cache hc;
  nn::mse hl = layer;
  hl.forward(hctx, hx, hy, hc);
  hl.backward(hctx, hdy, hdx, hc);

  device_env env;
  const device_tensor dx_in = device_of(s, x), dt = device_of(s, t), ddy = device_of({1}, dy);
  env.ctx.set_targets(&dt);
  device_tensor dy_out, ddx;
  nn::mse::cache<strata::cuda> dc;
  nn::mse dl = layer;
  dl.forward(env.ctx, dx_in, dy_out, dc);
  dl.backward(env.ctx, ddy, ddx, dc);
  env.exec.synchronize();

  // A double sum of exact squares in another order, rounded to float.
  require_close("loss", 0, read(dy_out)[0], hy[0], 1e-6 * std::abs(hy[0]));
  // diff and the scale 2 dy / n are formed by the same float operations on both sides.
  CHECK(same_bits(read(dc.diff), values_of(hc.diff)));
  CHECK(same_bits(read(ddx), values_of(hdx)));
}

TEST_CASE("losses of an empty batch are 0 on the device, as on the host") {
  device_env env;
  const device_tensor logits(shape{0, 5}), ids(shape{0}), x(shape{0, 3}), t(shape{0, 3});
  device_tensor y;
  env.ctx.set_targets(&ids);
  nn::softmax_cross_entropy::cache<strata::cuda> cc;
  nn::softmax_cross_entropy{}.forward(env.ctx, logits, y, cc);
  env.exec.synchronize();
  CHECK(read(y)[0] == 0.0f);
  env.ctx.set_targets(&t);
  nn::mse::cache<strata::cuda> mc;
  nn::mse{}.forward(env.ctx, x, y, mc);
  env.exec.synchronize();
  CHECK(read(y)[0] == 0.0f);
}

TEST_CASE("device layers give the same bits run to run, and allocate nothing on reuse") {
  std::mt19937 rng(29);
  const std::int64_t rows = 64, in = 96, out = 80;
  nn::linear fc = nn::make_linear(in, out);
  device_params store;
  store.bind(fc.weight, random_values(fc.weight.numel(), rng), std::vector<float>(fc.weight.numel(), 0.0f));
  store.bind(fc.bias, random_values(fc.bias.numel(), rng), std::vector<float>(fc.bias.numel(), 0.0f));
  nn::softmax_cross_entropy loss;
  const auto x = random_values(rows * in, rng, -2.0f, 2.0f);
  std::vector<float> t(rows);
  for (std::size_t r = 0; r < t.size(); ++r) t[r] = static_cast<float>(r % out);

  device_env env;
  const device_tensor dx_in = device_of({rows, in}, x), dt = device_of({rows}, t), seed = device_of({1}, {1.0f});
  env.ctx.set_targets(&dt);
  device_tensor logits, y, dlogits, dx;
  nn::linear::cache<strata::cuda> fc_cache;
  nn::softmax_cross_entropy::cache<strata::cuda> loss_cache;
  const auto step = [&] {
    strata::cuda::zero(fc.weight.grad(), fc.weight.numel() * sizeof(float));
    strata::cuda::zero(fc.bias.grad(), fc.bias.numel() * sizeof(float));
    fc.forward(env.ctx, dx_in, logits, fc_cache);
    loss.forward(env.ctx, logits, y, loss_cache);
    loss.backward(env.ctx, seed, dlogits, loss_cache);
    fc.backward(env.ctx, dlogits, dx, fc_cache);
    env.exec.synchronize();
    return std::vector<std::vector<float>>{read(y), read(dx), read(fc.weight.grad(), fc.weight.numel()),
                                           read(fc.bias.grad(), fc.bias.numel())};
  };
  const auto first = step();
  const auto allocations = strata::cuda::counters().allocations.load();
  const auto second = step();
  CHECK(strata::cuda::counters().allocations.load() == allocations);
  REQUIRE(first.size() == second.size());
  for (std::size_t k = 0; k < first.size(); ++k) {
    INFO("result " << k << " (loss, dx, weight.grad, bias.grad)");
    CHECK(same_bits(first[k], second[k]));
  }
}
