// Typed access to one JSON object of a config file: each getter checks the type and
// range and names the key path in its config_error; keys never asked for are collected.
#pragma once
#include <cmath>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../core/error.hpp"

namespace strata::detail {

// How a getter treats the string "auto" (Hugging Face Trainer style): an error unless
// the caller says the key may be left for strata to derive.
enum class auto_value { error, absent };

class json_reader {
 public:
  // `prefix` starts each message ("config"); `path` is this object's key path ("" = root).
  json_reader(const nlohmann::json& obj, std::string prefix, std::string path, std::vector<std::string>* unknown)
      : obj_(obj),
        prefix_(std::move(prefix)),
        path_(std::move(path)),
        unknown_(unknown),
        exceptions_(std::uncaught_exceptions()) {}
  json_reader(const json_reader&) = delete;
  json_reader& operator=(const json_reader&) = delete;
  // Records the keys of this object that no getter asked for (not while an error unwinds).
  ~json_reader() {
    if (!unknown_ || std::uncaught_exceptions() > exceptions_) return;
    try {
      for (auto& [k, v] : obj_.items())
        if (!used_.count(k)) unknown_->push_back(key(k));
    } catch (...) {  // out of memory: the warning is incomplete, nothing else is lost
    }
  }

  std::string key(std::string_view k) const { return path_.empty() ? std::string(k) : cat(path_, ".", k); }

  [[noreturn]] void fail(std::string_view k, const std::string& what) const {
    throw config_error(cat(prefix_, ": ", key(k), " ", what));
  }
  [[noreturn]] void expected(std::string_view k, const std::string& what, const nlohmann::json& got) const {
    fail(k, cat("must be ", what, ", got ", show(got)));
  }

  static std::string show(const nlohmann::json& j) {
    std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return s;
  }

  // The value of key `k`, or nullptr when absent or null (DeepSpeed reads null as unset).
  // "auto" is an error, or absent when the caller allows it.
  const nlohmann::json* find(std::string_view k, auto_value a = auto_value::error) {
    used_.insert(std::string(k));
    auto it = obj_.find(std::string(k));
    if (it == obj_.end() || it->is_null()) return nullptr;
    if (it->is_string() && it->get_ref<const std::string&>() == "auto") {
      if (a == auto_value::absent) return nullptr;
      fail(k,
           "is \"auto\", which the Hugging Face Trainer replaces before DeepSpeed sees it; strata needs a value "
           "here");
    }
    return &*it;
  }

  bool has(std::string_view k) const { return obj_.contains(std::string(k)); }

  std::optional<bool> boolean(std::string_view k) {
    const auto* j = find(k);
    if (!j) return std::nullopt;
    if (!j->is_boolean()) expected(k, "true or false", *j);
    return j->get<bool>();
  }

  // An integer in [lo, hi]; an integral float (5e8, as DeepSpeed configs often write
  // sizes) is accepted.
  std::optional<long long> integer(std::string_view k, long long lo, long long hi, auto_value a = auto_value::error) {
    const auto* j = find(k, a);
    if (!j) return std::nullopt;
    // Upper bounds of INT_MAX and above only guard the cast: named when exceeded.
    const bool open_ended = hi >= INT32_MAX;
    auto range = [&] { return open_ended ? cat("an integer >= ", lo) : cat("an integer ", lo, "..", hi); };
    long long v = 0;
    if (j->is_number_unsigned()) {
      const auto u = j->get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) expected(k, cat("an integer <= ", hi), *j);
      v = static_cast<long long>(u);
    } else if (j->is_number_integer()) {
      v = j->get<std::int64_t>();
    } else if (j->is_number_float()) {
      const double d = j->get<double>();
      if (!(std::floor(d) == d && d >= -9.2e18 && d <= 9.2e18)) expected(k, range(), *j);
      v = static_cast<long long>(d);
    } else {
      expected(k, range(), *j);
    }
    if (v < lo) expected(k, range(), *j);
    if (v > hi) expected(k, open_ended ? cat("an integer <= ", hi) : range(), *j);
    return v;
  }

  // A finite number in [lo, hi] (bounds as text in the message).
  std::optional<double> number(std::string_view k, double lo, double hi, std::string_view what) {
    const auto* j = find(k);
    if (!j) return std::nullopt;
    if (!j->is_number()) expected(k, std::string(what), *j);
    const double d = j->get<double>();
    if (!std::isfinite(d) || d < lo || d > hi) expected(k, std::string(what), *j);
    return d;
  }

  std::optional<std::string> string(std::string_view k) {
    const auto* j = find(k);
    if (!j) return std::nullopt;
    if (!j->is_string()) expected(k, "a string", *j);
    return j->get<std::string>();
  }

  // One of `choices`, compared exactly or ignoring ASCII case.
  std::optional<std::string> one_of(std::string_view k, std::initializer_list<std::string_view> choices,
                                    bool any_case = false) {
    const auto* j = find(k);
    if (!j) return std::nullopt;
    std::string list;
    for (auto c : choices) list += cat(list.empty() ? "" : ", ", "\"", c, "\"");
    const std::string want = cat("one of ", list, any_case ? " (any case)" : "");
    if (!j->is_string()) expected(k, want, *j);
    const auto& s = j->get_ref<const std::string&>();
    for (auto c : choices)
      if (any_case ? iequal(s, c) : s == c) return std::string(c);
    expected(k, want, *j);
  }

  // A nested object, or nullptr when absent; anything but an object is an error.
  const nlohmann::json* object(std::string_view k) {
    const auto* j = find(k);
    if (j && !j->is_object()) expected(k, "an object", *j);
    return j;
  }

  // Marks a key as understood without reading it (a value strata accepts and ignores).
  void accept(std::string_view k) { used_.insert(std::string(k)); }

  const std::string& prefix() const noexcept { return prefix_; }
  const std::string& path() const noexcept { return path_; }
  std::vector<std::string>* unknown() const noexcept { return unknown_; }

  static bool iequal(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
      if (lower(a[i]) != lower(b[i])) return false;
    }
    return true;
  }

 private:
  const nlohmann::json& obj_;
  std::string prefix_, path_;
  std::vector<std::string>* unknown_;
  std::set<std::string> used_;
  int exceptions_;
};

// Parses `text` as JSON, refusing a key given twice in one object at any depth, which the
// parser would otherwise settle silently by keeping the last (DeepSpeed refuses such a
// file too): a config_error naming the key's path. Invalid JSON is a config_error too.
// `source` begins every message.
inline nlohmann::json parse_json_once_each(std::string_view text, const std::string& source) {
  using event = nlohmann::json::parse_event_t;
  // keys[d]: the keys seen so far in the object open at depth d - 1; path[d]: the key its
  // value at depth d was read under ("[]" inside an array).
  std::vector<std::set<std::string, std::less<>>> keys(1);
  std::vector<std::string> path(1);
  const auto at = [&](std::size_t depth) -> std::size_t {
    if (keys.size() <= depth) keys.resize(depth + 1), path.resize(depth + 1);
    return depth;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), [&](int depth, event ev, nlohmann::json& value) {
      const auto d = static_cast<std::size_t>(depth);
      if (ev == event::object_start || ev == event::array_start) {
        keys[at(d + 1)].clear();
        if (ev == event::array_start) path[d + 1] = "[]";
      } else if (ev == event::key) {
        const auto& k = value.get_ref<const std::string&>();
        path[at(d)] = k;
        if (!keys[d].insert(k).second) {
          std::string where;
          for (std::size_t i = 1; i <= d; ++i) where += (i > 1 ? "." : "") + path[i];
          throw config_error(cat(source, ": ", where,
                                 " is given twice; give each key once (a JSON parser would keep "
                                 "the last silently)"));
        }
      }
      return true;
    });
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    throw config_error(cat(source, ": not valid JSON: ", what));
  }
}

// A reader over the object at `k` of `parent` (an empty object when absent).
inline json_reader child(json_reader& parent, std::string_view k) {
  static const nlohmann::json empty = nlohmann::json::object();
  const auto* j = parent.object(k);
  return json_reader(j ? *j : empty, parent.prefix(), parent.key(k), parent.unknown());
}

}  // namespace strata::detail
