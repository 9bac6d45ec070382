// A tiny command-line reader for the examples: --name value pairs and --flag switches,
// with a clear error for unknown options and values of the wrong type, and --help.
#pragma once
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <string_view>

#include <strata/comm/environment.hpp>
#include <strata/core/error.hpp>

namespace examples {

// A mistake on the command line (an unknown option, a missing or mistyped value): the
// program prints it and its usage, and exits 2.
class usage_error : public strata::config_error {
 public:
  using strata::config_error::config_error;
};

inline bool wants_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") return true;
  return false;
}

// The options every example reads through loop_options and apply_config, for its usage.
inline constexpr const char* common_usage =
    "common options:\n"
    "  --steps N  --batch B (global rows per step)  --seed S  --micro-batches K  --lr X\n"
    "  --config ds_config.json (DeepSpeed's; decides policies, optimizer, batch sizes)\n"
    "  --save DIR [--save-every N]  --load DIR  --export FILE.safetensors  --init FILE.safetensors\n"
    "  --report FILE.json  --metrics FILE.jsonl  --log-every N  --peak-flops F (MFU; default: measured)\n"
    "  --trace FILE.json (Chrome trace: every rank's layers, collectives, optimizer, data, saves)\n"
    "  --profile (rank 0 prints where each logged step's time went: layer kinds, optimizer, waits)\n"
    "  --mlflow URI [--experiment NAME] [--run-name NAME] (an MLflow tracking server, http://host:port;\n"
    "     default $MLFLOW_TRACKING_URI, $MLFLOW_EXPERIMENT_NAME)\n"
    "  --quiet  --device cpu|cuda  --help\n";

// The job's world as its launcher says (strata::environment), or the program's error and
// exit status 2 where it cannot form (a launch variable missing, rank 0 unreachable, a
// refused job secret): never an abort.
inline std::unique_ptr<strata::environment> start_environment(const char* program, int& argc, char**& argv) {
  try {
    return std::make_unique<strata::environment>(argc, argv);
  } catch (const strata::error& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    std::exit(2);
  }
}

// What main does with the outcome of its body: --help prints the usage (exit 0); an error
// prints one line on rank 0, with the usage after a usage_error (exit 2); running out of
// host memory, or any other exception, one line too (exit 2), never an abort. A communication
// error is printed by every rank that sees it: the failed peer may be rank 0 itself, and
// each survivor's line names its own communicator and rank.
template <class Body>
int run_main(const char* program, const char* usage, int rank, int argc, char** argv, Body&& body) {
  if (wants_help(argc, argv)) {
    if (rank == 0) std::fputs(usage, stdout);
    return 0;
  }
  try {
    return body();
  } catch (const usage_error& e) {
    if (rank == 0) std::fprintf(stderr, "%s: error: %s\n%s", program, e.what(), usage);
  } catch (const strata::comm_error& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
  } catch (const strata::error& e) {
    if (rank == 0) std::fprintf(stderr, "%s: error: %s\n", program, e.what());
  } catch (const std::bad_alloc&) {
    // Printed by every rank that ran out: ranks may differ in what they hold.
    std::fprintf(stderr, "%s: error: rank %d is out of host memory: the run's sizes need more than this machine has\n",
                 program, rank);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
  }
  return 2;
}

class args {
 public:
  args(int argc, char** argv, std::set<std::string> flags) : flags_(std::move(flags)) {
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (arg.rfind("--", 0) != 0)
        throw usage_error("unexpected argument '" + std::string(arg) + "' (options start with --)");
      std::string a(arg.substr(2));
      if (flags_.count(a)) {
        values_.insert_or_assign(std::move(a), std::string(1, '1'));
      } else {
        if (i + 1 >= argc) throw usage_error("option --" + a + " needs a value");
        values_.insert_or_assign(std::move(a), std::string(argv[++i]));
      }
    }
  }
  // Every option given must have been read: catches misspelt options.
  void check_all_used() const {
    for (auto& [k, v] : values_)
      if (!used_.count(k)) throw usage_error("unknown option --" + k);
  }
  bool has(const std::string& k) const { return values_.count(k) > 0; }
  bool flag(const std::string& k) { return used_.insert(k), values_.count(k) > 0; }
  std::string str(const std::string& k, std::string def) {
    used_.insert(k);
    auto it = values_.find(k);
    return it == values_.end() ? def : it->second;
  }
  // An integer in [min, max]: anything else is a usage error naming the option, never a
  // value that wraps, is cut to an int, or divides by zero later.
  long integer(const std::string& k, long def, long min = std::numeric_limits<long>::min(),
               long max = std::numeric_limits<long>::max()) {
    used_.insert(k);
    auto it = values_.find(k);
    if (it == values_.end()) return def;
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(it->second.c_str(), &end, 10);
    if (end == it->second.c_str() || *end)
      throw usage_error("--" + k + " expects an integer, got '" + it->second + "'");
    if (errno == ERANGE || v > max)
      throw usage_error("--" + k + " " + it->second + " is too large (at most " + std::to_string(max) + ")");
    if (v < min) throw usage_error("--" + k + " " + it->second + " is less than " + std::to_string(min));
    return v;
  }
  // An int of at least min (a count or a size: ranks, layers, features).
  int count(const std::string& k, int def, int min = 1) {
    return static_cast<int>(integer(k, def, min, std::numeric_limits<int>::max()));
  }
  double real(const std::string& k, double def) {
    used_.insert(k);
    auto it = values_.find(k);
    if (it == values_.end()) return def;
    char* end = nullptr;
    double v = std::strtod(it->second.c_str(), &end);
    if (end == it->second.c_str() || *end) throw usage_error("--" + k + " expects a number, got '" + it->second + "'");
    return v;
  }

 private:
  std::set<std::string> flags_, used_;
  std::map<std::string, std::string> values_;
};

}  // namespace examples
