// strata-ranks: 4
// Checkpoints across tensor and pipeline layouts: a gpt checkpoint saved at one
// (tp, dp, pp, zero) loads at another with the same weights (elements move, never
// change) and the same loss; resuming at the same layout is bit-identical; foreign or
// corrupt checkpoints are refused naming the file.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include <strata/strata.hpp>
#include "../../examples/gpt/model.hpp"
#include "catch.hpp"
#include "relative_distance.hpp"
#include "shared_dir.hpp"

using namespace strata;
namespace fs = std::filesystem;

namespace {

constexpr gpt::config small{32, 8, 16, 4, 3};  // vocab, seq, dim, heads, layers: 6 pipeline layers
constexpr long global_batch = 8;

using test::shared_dir;

struct layout {
  int tp, dp, pp;
  int size() const { return tp * dp * pp; }
};

// The first tp * dp * pp ranks of the world as one grid (the others get none).
struct sub_grid {
  world_comm comm;
  std::optional<grid<world_comm>> g;
  sub_grid(world_comm& w, layout l) : comm(w.split(w.rank() < l.size() ? 0 : 1, w.rank())) {
    if (w.rank() < l.size()) g.emplace(comm, grid_dims{.tensor = l.tp, .pipeline = l.pp});
  }
};

template <class S>
using gpt_trainer = trainer<gpt::model, host, S>;

trainer_options options() {
  trainer_options o;
  o.micro_batches = 2;
  o.schedule = lr_schedule::constant(3e-3);
  o.bucket_elems = 1500;  // several buckets per stage, so pieces cross param boundaries
  o.seed = 5;
  return o;
}

template <class S>
gpt_trainer<S> make(grid<world_comm>& g) {
  return gpt_trainer<S>(g, gpt::make_model(small, g.tp_rank(), g.tp_size()), options());
}

void fill(grid<world_comm>& g, long step, strata::batch<>& b) {
  static const gpt::synthetic_tokens data(small, 9);
  const long local = global_batch / g.dp_size();
  data.fill(static_cast<std::uint64_t>(step * global_batch + g.dp_rank() * local), local, b);
}

template <class Trainer>
void train(Trainer& tr, long from, long to) {
  strata::batch<> b;
  for (long s = from; s < to; ++s) {
    fill(tr.grid_ref(), s, b);
    tr.step(b);
  }
}

template <class Trainer>
float eval_at(Trainer& tr, long step) {
  strata::batch<> b;
  fill(tr.grid_ref(), step, b);
  return tr.evaluate(b);
}

// Broadcasts world rank 0's vector to every rank.
void share(world_comm& w, std::vector<float>& v) {
  std::size_t n = v.size();
  w.broadcast(std::span<std::size_t>(&n, 1), 0);
  v.resize(n);
  w.broadcast(std::span<float>(v), 0);
}

// Saves at `from` (stage SaveS) after 4 steps, loads at `to` (stage LoadS); one more step
// on each side ends at the same weights within the sums' order.
template <class SaveS, class LoadS>
void check_reshard(layout from, layout to, const char* tag) {
  environment env;
  auto& w = env.world();
  shared_dir dir(w, tag);
  std::vector<float> saved_master, trained_on;
  float saved_loss = 0;
  {
    sub_grid sg(w, from);
    if (sg.g) {
      auto tr = make<SaveS>(*sg.g);
      train(tr, 0, 4);
      tr.save(dir.path);
      saved_master = tr.gather_master();
      saved_loss = eval_at(tr, 4);
      train(tr, 4, 5);
      trained_on = tr.gather_master();
    }
  }
  w.broadcast(std::span<float>(&saved_loss, 1), 0);
  share(w, saved_master);
  share(w, trained_on);
  REQUIRE_FALSE(saved_master.empty());
  sub_grid sg(w, to);
  if (sg.g) {
    auto tr = make<LoadS>(*sg.g);
    tr.load(dir.path);
    CHECK(tr.steps_done() == 4);
    CHECK(weights_hash(tr.gather_master()) == weights_hash(saved_master));
    const float loss = eval_at(tr, 4);
    // tp changes how GEMMs and the vocabulary-parallel loss split their sums: the loss
    // moves in the last bits of fp32, not more (1e-6 relative is ~8 ulps).
    INFO(tag << ": loss after load " << loss << ", saved " << saved_loss << ", relative difference "
             << std::abs(loss - saved_loss) / std::abs(saved_loss));
    if (sg.g->dp_rank() == 0 && sg.g->tp_rank() == 0 && sg.g->pp_rank() == 0)
      std::printf("%s: loss relative difference after load %.3g\n", tag,
                  std::abs(loss - saved_loss) / std::abs(saved_loss));
    CHECK(std::abs(loss - saved_loss) <= 1e-6f * std::abs(saved_loss));
    // It trains on as the saved run does, moments included: within 1e-6 relative of the
    // saved run's next step (another layout sums in another order: measured at most
    // 6.4e-8; with the moments zeroed after load_checkpoint in
    // train/detail/checkpoint_view.hpp's load(), 1.6e-2).
    train(tr, 4, 5);
    const double d = test::relative_distance(tr.gather_master(), trained_on);
    INFO(tag << ": one step after loading, relative distance " << d << " from the saved run's");
    if (sg.g->dp_rank() == 0 && sg.g->tp_rank() == 0 && sg.g->pp_rank() == 0)
      std::printf("%s: one step after loading, weights %.3g relative from the saved run's\n", tag, d);
    CHECK(d <= 1e-6);
  }
  w.barrier();
}

// Saves at step 3, loads into a fresh trainer, trains 3 more: the same weights as 6 straight.
template <class S>
void check_resume(layout l, const char* tag) {
  environment env;
  auto& w = env.world();
  shared_dir dir(w, tag);
  sub_grid sg(w, l);
  if (sg.g) {
    auto straight = make<S>(*sg.g);
    train(straight, 0, 6);
    const auto want = weights_hash(straight.gather_master());
    auto first = make<S>(*sg.g);
    train(first, 0, 3);
    first.save(dir.path, {{"data_position", 3}});
    auto resumed = make<S>(*sg.g);
    CHECK(resumed.load(dir.path).at("data_position") == 3);
    train(resumed, 3, 6);
    CHECK(weights_hash(resumed.gather_master()) == want);
  }
  w.barrier();
}

}  // namespace

TEST_CASE("a checkpoint loads at another tensor x data x pipeline layout and stage") {
  check_reshard<zero<3>, zero<1>>({1, 4, 1}, {2, 1, 2}, "a");        // (1,4,1,3) -> (2,1,2,1)
  check_reshard<zero<3>, replicated>({1, 4, 1}, {1, 1, 1}, "b");     // (1,4,1,3) -> one process
  check_reshard<zero<1>, zero<2>>({2, 2, 1}, {1, 2, 2}, "c");        // (2,2,1,1) -> (1,2,2,2)
  check_reshard<replicated, zero<3>>({1, 2, 2}, {2, 2, 1}, "d");     // (1,2,2,0) -> (2,2,1,3)
  check_reshard<zero<2>, zero<1>>({2, 1, 2}, {1, 4, 1}, "e");        // (2,1,2,2) -> (1,4,1,1)
  check_reshard<replicated, replicated>({1, 1, 4}, {2, 1, 2}, "f");  // (1,1,4,0) -> (2,1,2,0)
  check_reshard<replicated, zero<3>>({1, 1, 1}, {2, 2, 1}, "g");     // one process -> (2,2,1,3)
  check_reshard<zero<3>, replicated>({2, 1, 2}, {1, 1, 4}, "h");     // (2,1,2,3) -> (1,1,4,0)
}

TEST_CASE("resume at the same tensor/pipeline layout is bit-identical") {
  check_resume<zero<1>>({2, 1, 2}, "r1");
  check_resume<zero<3>>({2, 2, 1}, "r2");
  check_resume<replicated>({1, 2, 2}, "r3");
}

TEST_CASE("a tp x pp checkpoint of another model or with a corrupt shard is refused, naming the file") {
  environment env;
  auto& w = env.world();
  shared_dir dir(w, "tp-refuse");
  grid g(w, {.tensor = 2, .pipeline = 2});
  {
    auto tr = make<zero<1>>(g);
    train(tr, 0, 2);
    tr.save(dir.path);
  }
  // Wider model at another layout: the full shapes differ, whatever the slices.
  gpt::config wide = small;
  wide.dim = 24;
  wide.heads = 4;
  grid dp4(w);
  gpt_trainer<replicated> other(dp4, gpt::make_model(wide), options());
  CHECK_THROWS_WITH(other.load(dir.path), strata_test::contains_text("manifest.json") &&
                                              strata_test::contains_text("checkpoint of another model"));

  // A flipped bit in world rank 3's shard (tensor rank 1 of the last stage).
  const fs::path shard = dir.path / "step-00000002" / "rank-00003.bin";
  if (w.rank() == 0) {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    f.seekg(8);
    f.read(&c, 1);
    c ^= 0x01;
    f.seekp(8);
    f.write(&c, 1);
  }
  w.barrier();
  auto tr = make<zero<2>>(dp4);
  CHECK_THROWS_WITH(tr.load(dir.path), strata_test::contains_text("rank-00003.bin") &&
                                           strata_test::contains_text("checksum does not match"));
}
