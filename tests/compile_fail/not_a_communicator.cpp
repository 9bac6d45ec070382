// A grid over a type that is not a communicator names the missing member.
// expect: not a communicator: needs all_reduce
#include <strata/comm/grid.hpp>

struct only_rank_and_size {
  int rank() const { return 0; }
  int size() const { return 1; }
};

int main() {
  only_rank_and_size c;
  strata::grid g(c, {});
  (void)g;
}
