// strata-ranks: 4
// Checkpoints: resuming at the same layout continues bit-identically for every stage;
// a checkpoint loads at another data-parallel size and stage with the same weights and
// loss; corrupt, truncated or foreign checkpoints are refused with the file named.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "catch.hpp"
#include "mlp_run.hpp"
#include "shared_dir.hpp"

using namespace strata;
namespace fs = std::filesystem;

namespace {

using test::shared_dir;

// The first `n` ranks of the world as their own data-parallel group (others get none).
struct sub_world {
  world_comm comm;
  std::optional<grid<world_comm>> g;
  sub_world(world_comm& w, int n) : comm(w.split(w.rank() < n ? 0 : 1, w.rank())) {
    if (w.rank() < n) g.emplace(comm);
  }
};

template <class S, class O = adamw, class P = fp32>
using mlp_trainer = trainer<mlp::model, host, S, O, P>;

template <class Trainer>
void train(Trainer& tr, const test::mlp_setup& s, long from, long to) {
  mlp::synthetic_data data(s.shape, s.seed);
  auto& g = tr.grid_ref();
  const long local = s.global_batch / g.dp_size();
  strata::batch<> b;
  for (long step = from; step < to; ++step) {
    data.fill(static_cast<std::uint64_t>(step * s.global_batch + g.dp_rank() * local), local, b);
    tr.step(b);
  }
}

template <class Trainer>
float eval_at(Trainer& tr, const test::mlp_setup& s, long step) {
  mlp::synthetic_data data(s.shape, s.seed);
  auto& g = tr.grid_ref();
  const long local = s.global_batch / g.dp_size();
  strata::batch<> b;
  data.fill(static_cast<std::uint64_t>(step * s.global_batch + g.dp_rank() * local), local, b);
  return tr.evaluate(b);
}

template <class S, class P>
void check_resume_bit_identical(const char* tag) {
  environment env;
  grid g(env.world());
  shared_dir dir(env.world(), tag);
  test::mlp_setup s;
  s.opts.micro_batches = 2;
  if constexpr (std::is_same_v<P, mixed<fp16>>)
    s.opts.loss_scaler.loss_scale_window = 3;  // scale changes inside the run
  mlp_trainer<S, adamw, P> straight(g, mlp::make_model(s.shape), s.opts);
  train(straight, s, 0, 20);
  const auto want = weights_hash(straight.gather_master());

  mlp_trainer<S, adamw, P> first(g, mlp::make_model(s.shape), s.opts);
  train(first, s, 0, 10);
  first.save(dir.path, {{"data_position", 10}});
  mlp_trainer<S, adamw, P> resumed(g, mlp::make_model(s.shape), s.opts);
  const auto extra = resumed.load(dir.path);
  CHECK(resumed.steps_done() == 10);
  CHECK(extra.at("data_position") == 10);
  CHECK(resumed.loss_scale() == first.loss_scale());
  train(resumed, s, 10, 20);
  CHECK(weights_hash(resumed.gather_master()) == want);
}

}  // namespace

TEST_CASE("resume at the same layout is bit-identical to an uninterrupted run, every stage") {
  check_resume_bit_identical<replicated, fp32>("resume0");
  check_resume_bit_identical<zero<1>, fp32>("resume1");
  check_resume_bit_identical<zero<2>, mixed<bf16>>("resume2");
  check_resume_bit_identical<zero<3>, fp32>("resume3");
  check_resume_bit_identical<zero<3, offload_optimizer>, mixed<fp16>>("resume3o");
}

namespace {
// Saves at (dp = from_n, stage SaveS), loads at (dp = to_n, stage LoadS): the gathered
// master weights are bitwise the saved ones, and the loss right after loading equals
// the saved trainer's loss on the same batch.
template <class SaveS, class LoadS>
void check_reshard(int from_n, int to_n, const char* tag) {
  environment env;
  auto& w = env.world();
  shared_dir dir(w, tag);
  test::mlp_setup s;
  s.global_batch = 48;  // divisible by 1, 2, 3, 4
  std::vector<float> saved_master;
  float saved_loss = 0;
  {
    sub_world sw(w, from_n);
    if (sw.g) {
      mlp_trainer<SaveS> tr(*sw.g, mlp::make_model(s.shape), s.opts);
      train(tr, s, 0, 6);
      tr.save(dir.path);
      saved_master = tr.gather_master();
      saved_loss = eval_at(tr, s, 6);
    }
  }
  w.broadcast(std::span<float>(&saved_loss, 1), 0);
  std::size_t n = saved_master.size();
  w.broadcast(std::span<std::size_t>(&n, 1), 0);
  saved_master.resize(n);
  w.broadcast(std::span<float>(saved_master), 0);
  sub_world sw(w, to_n);
  if (sw.g) {
    mlp_trainer<LoadS> tr(*sw.g, mlp::make_model(s.shape), s.opts);
    tr.load(dir.path);
    CHECK(tr.steps_done() == 6);
    CHECK(weights_hash(tr.gather_master()) == weights_hash(saved_master));
    const float loss = eval_at(tr, s, 6);
    INFO(tag << ": loss after load " << loss << ", saved " << saved_loss);
    CHECK(std::abs(loss - saved_loss) <= 1e-6f * std::abs(saved_loss));
    train(tr, s, 6, 8);  // and it trains on
  }
  w.barrier();
}
}  // namespace

TEST_CASE("a checkpoint loads at another data-parallel size and stage") {
  check_reshard<zero<3>, replicated>(4, 2, "r1");  // (dp4, z3) -> (dp2, z0)
  check_reshard<zero<3>, replicated>(4, 1, "r2");  // (dp4, z3) -> one process
  check_reshard<zero<3>, zero<2>>(4, 3, "r3");     // (dp4, z3) -> (dp3, z2)
  check_reshard<zero<2>, zero<1>>(4, 4, "r4");     // (dp4, z2) -> (dp4, z1)
  check_reshard<zero<1>, zero<3>>(2, 4, "r5");     // (dp2, z1) -> (dp4, z3)
  check_reshard<replicated, zero<2>>(1, 4, "r6");  // one process -> (dp4, z2)
  check_reshard<replicated, zero<3>>(4, 3, "r7");  // (dp4, z0) -> (dp3, z3)
}

TEST_CASE("corrupt, truncated and foreign checkpoints are refused, naming the file") {
  environment env;
  grid g(env.world());
  shared_dir dir(env.world(), "corrupt");
  test::mlp_setup s;
  {
    mlp_trainer<zero<2>> tr(g, mlp::make_model(s.shape), s.opts);
    train(tr, s, 0, 2);
    tr.save(dir.path);
  }
  const fs::path step_dir = dir.path / "step-00000002";
  const fs::path shard = step_dir / "rank-00001.bin";
  const auto size = fs::file_size(shard);
  auto load_error = [&]() -> std::string {
    mlp_trainer<zero<2>> tr(g, mlp::make_model(s.shape), s.opts);
    try {
      tr.load(dir.path);
    } catch (const checkpoint_error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(load_error() == "no error");

  // A flipped bit in the middle of rank 1's shard.
  if (env.rank() == 0) {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(size / 2));
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.write(&c, 1);
  }
  env.world().barrier();
  auto msg = load_error();
  CHECK_THAT(msg,
             strata_test::contains_text("rank-00001.bin") && strata_test::contains_text("checksum does not match"));

  // Truncated.
  if (env.rank() == 0) fs::resize_file(shard, size - 100);
  env.world().barrier();
  msg = load_error();
  CHECK_THAT(msg, strata_test::contains_text("rank-00001.bin") && strata_test::contains_text("truncated"));

  // Another model: same directory, different hidden size.
  test::mlp_setup other = s;
  other.shape.hidden = 24;
  mlp_trainer<zero<2>> tr(g, mlp::make_model(other.shape), other.opts);
  if (env.rank() == 0) fs::resize_file(shard, size);  // size right again; the model check comes first
  env.world().barrier();
  try {
    tr.load(dir.path);
    FAIL("a checkpoint of another model loaded");
  } catch (const checkpoint_error& e) {
    CHECK_THAT(std::string(e.what()), strata_test::contains_text("manifest.json") &&
                                          strata_test::contains_text("checkpoint of another model"));
  }
  // A directory with no checkpoint.
  CHECK_THROWS_WITH(tr.load(dir.path / "nothing"), strata_test::contains_text("no checkpoint here"));
}
