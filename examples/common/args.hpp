// A tiny command-line reader for the examples: --name value pairs and --flag switches,
// with a clear error for unknown options and values of the wrong type.
#pragma once
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include <strata/core/error.hpp>

namespace examples {

class args {
 public:
  args(int argc, char** argv, std::set<std::string> flags) : flags_(std::move(flags)) {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) != 0) throw strata::config_error("unexpected argument '" + a + "' (options start with --)");
      a = a.substr(2);
      if (flags_.count(a)) {
        values_[a] = "1";
      } else {
        if (i + 1 >= argc) throw strata::config_error("option --" + a + " needs a value");
        values_[a] = argv[++i];
      }
    }
  }
  // Every option given must have been read: catches misspelt options.
  void check_all_used() const {
    for (auto& [k, v] : values_)
      if (!used_.count(k)) throw strata::config_error("unknown option --" + k);
  }
  bool has(const std::string& k) const { return values_.count(k) > 0; }
  bool flag(const std::string& k) { return used_.insert(k), values_.count(k) > 0; }
  std::string str(const std::string& k, std::string def) {
    used_.insert(k);
    auto it = values_.find(k);
    return it == values_.end() ? def : it->second;
  }
  long integer(const std::string& k, long def) {
    used_.insert(k);
    auto it = values_.find(k);
    if (it == values_.end()) return def;
    char* end = nullptr;
    long v = std::strtol(it->second.c_str(), &end, 10);
    if (end == it->second.c_str() || *end)
      throw strata::config_error("--" + k + " expects an integer, got '" + it->second + "'");
    return v;
  }
  double real(const std::string& k, double def) {
    used_.insert(k);
    auto it = values_.find(k);
    if (it == values_.end()) return def;
    char* end = nullptr;
    double v = std::strtod(it->second.c_str(), &end);
    if (end == it->second.c_str() || *end)
      throw strata::config_error("--" + k + " expects a number, got '" + it->second + "'");
    return v;
  }

 private:
  std::set<std::string> flags_, used_;
  std::map<std::string, std::string> values_;
};

}  // namespace examples
