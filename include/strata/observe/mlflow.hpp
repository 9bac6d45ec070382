// A run in an MLflow tracking server, through MLflow's REST API over libcurl (no Python):
// the experiment found or created by name, the run created with params, metrics sent in
// batches, files logged as artifacts where the server stores them itself, and the run
// ended FINISHED or FAILED. Link strata::mlflow (libcurl) to use it.
//
// Tracking is never what stops training: a server that cannot be reached at the start
// is a warning and the run is inactive; a call that fails later is a warning, and after
// three failures in a row the run stops calling (the --metrics file keeps everything).
#pragma once
#include <curl/curl.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../comm/detail/abort_hooks.hpp"
#include "../core/error.hpp"
#include "../core/version.hpp"

namespace strata {

struct mlflow_options {
  std::string uri;                    // the tracking server, http://host:port (MLFLOW_TRACKING_URI's form)
  std::string experiment = "strata";  // found by name, or created
  std::string run_name;               // "": the server names the run
  double timeout_s = 10;              // each request but artifact uploads (those: no progress for 30 s)
};

namespace detail {

// The leaves of nested objects as "a.b.c" keys, arrays by index; `skip` drops leaves of that name.
inline void flatten_json(const nlohmann::json& j, const std::string& prefix,
                         std::vector<std::pair<std::string, nlohmann::json>>& out, const char* skip = nullptr) {
  const auto key = [&](const std::string& k) { return prefix.empty() ? k : prefix + "." + k; };
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      if (!(skip && it.key() == skip && !it.value().is_structured()))
        flatten_json(it.value(), key(it.key()), out, skip);
  } else if (j.is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) flatten_json(j[i], key(std::to_string(i)), out, skip);
  } else {
    out.emplace_back(prefix, j);
  }
}

inline long long epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One libcurl handle and the request forms MLflow's API needs.
class http_client {
 public:
  struct response {
    long status = 0;  // HTTP status; 0: no answer (error says why)
    std::string body, error;
    bool ok() const { return status >= 200 && status < 300; }
  };

  explicit http_client(double timeout_s) : timeout_ms_(static_cast<long>(timeout_s * 1000)) {
    static const bool initialized = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
    expects<config_error>(initialized, "libcurl failed to initialize");
    curl_ = curl_easy_init();
    expects<config_error>(curl_ != nullptr, "libcurl: no handle");
    // MLflow's own client variables: a bearer token, or a user and password.
    if (const char* t = std::getenv("MLFLOW_TRACKING_TOKEN"); t && *t)
      headers_ = curl_slist_append(headers_, (std::string("Authorization: Bearer ") + t).c_str());
    if (const char* u = std::getenv("MLFLOW_TRACKING_USERNAME"); u && *u) {
      const char* p = std::getenv("MLFLOW_TRACKING_PASSWORD");
      user_ = std::string(u) + ":" + (p ? p : "");
    }
  }
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;
  ~http_client() {
    curl_slist_free_all(headers_);
    curl_easy_cleanup(curl_);
  }

  response json_request(const char* method, const std::string& url, const std::string& body) {
    curl_slist* h = curl_slist_append(copy_headers(), "Content-Type: application/json");
    reset(method, url, h);
    if (!body.empty() || std::string(method) == "POST") {
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDS, body.c_str());
      curl_easy_setopt(curl_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    }
    curl_easy_setopt(curl_, CURLOPT_TIMEOUT_MS, timeout_ms_);
    auto r = perform();
    curl_slist_free_all(h);
    return r;
  }

  // PUTs a file's bytes, read as they are sent (a model's files need not fit in memory).
  response put_file(const std::string& url, const std::filesystem::path& file) {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(file.c_str(), "rb"), &std::fclose);
    if (!f) return {0, "", "cannot open " + file.string()};
    curl_slist* h = curl_slist_append(copy_headers(), "Content-Type: application/octet-stream");
    reset("PUT", url, h);
    curl_easy_setopt(curl_, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl_, CURLOPT_READDATA, f.get());
    curl_easy_setopt(curl_, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(std::filesystem::file_size(file)));
    curl_easy_setopt(curl_, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(curl_, CURLOPT_LOW_SPEED_TIME, 30L);
    auto r = perform();
    curl_slist_free_all(h);
    return r;
  }

 private:
  curl_slist* copy_headers() const {
    curl_slist* out = nullptr;
    for (const curl_slist* p = headers_; p; p = p->next) out = curl_slist_append(out, p->data);
    return out;
  }
  void reset(const char* method, const std::string& url, curl_slist* headers) {
    curl_easy_reset(curl_);
    curl_easy_setopt(curl_, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl_, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl_, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl_, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM: training has threads
    curl_easy_setopt(curl_, CURLOPT_CONNECTTIMEOUT_MS, std::min(timeout_ms_, 5000L));
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &http_client::collect);
    curl_easy_setopt(curl_, CURLOPT_WRITEDATA, &body_);
    curl_easy_setopt(curl_, CURLOPT_ERRORBUFFER, error_);
    if (!user_.empty()) curl_easy_setopt(curl_, CURLOPT_USERPWD, user_.c_str());
  }
  response perform() {
    body_.clear();
    error_[0] = '\0';
    response r;
    const CURLcode c = curl_easy_perform(curl_);
    if (c != CURLE_OK) {
      r.error = error_[0] ? error_ : curl_easy_strerror(c);
      return r;
    }
    curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &r.status);
    r.body = std::move(body_);
    return r;
  }
  static std::size_t collect(char* data, std::size_t size, std::size_t n, void* out) {
    static_cast<std::string*>(out)->append(data, size * n);
    return size * n;
  }

  CURL* curl_ = nullptr;
  curl_slist* headers_ = nullptr;
  std::string user_, body_;
  char error_[CURL_ERROR_SIZE] = {};
  long timeout_ms_;
};

}  // namespace detail

class mlflow_run {
 public:
  // MLflow's limits for one runs/log-batch call.
  static constexpr std::size_t max_params_per_call = 100, max_metrics_per_call = 1000, max_param_chars = 6000;

  // Finds or creates the experiment and creates the run, logging `params` (flattened:
  // {"layout": {"tp": 2}} is the param layout.tp = 2). A URI that is not http(s) is a
  // config_error; a server that cannot be reached is a warning, and the run is inactive.
  explicit mlflow_run(mlflow_options o, const nlohmann::json& params = nlohmann::json::object())
      : o_(std::move(o)), uncaught_(std::uncaught_exceptions()) {
    while (!o_.uri.empty() && o_.uri.back() == '/') o_.uri.pop_back();
    expects<config_error>(o_.uri.rfind("http://", 0) == 0 || o_.uri.rfind("https://", 0) == 0, [&] {
      return "--mlflow " + o_.uri + ": strata talks to a tracking server over HTTP (http://host:port)";
    });
    expects<config_error>(!o_.experiment.empty(), "--experiment: the experiment needs a name");
    http_ = std::make_unique<detail::http_client>(o_.timeout_s);
    if (!start()) return;
    log_params(params);
    // The time-out abort (comm/detail/hang_watch.hpp) ends the job with MPI_Abort, past
    // every destructor: the run is marked FAILED just before.
    abort_hook_ = detail::add_abort_hook([this] {
      // From the aborting thread: a call of this run's own thread in progress (holding
      // the lock) is waited for briefly, no longer.
      std::unique_lock lock(m_, std::defer_lock);
      if (lock.try_lock_for(std::chrono::seconds(3))) end("FAILED");
    });
  }
  mlflow_run(const mlflow_run&) = delete;
  mlflow_run& operator=(const mlflow_run&) = delete;
  // Ends the run if finish() did not: FAILED while an exception unwinds, else FINISHED.
  ~mlflow_run() {
    try {
      finish(std::uncaught_exceptions() <= uncaught_);
    } catch (...) {  // a destructor reports nothing further
    }
  }

  bool active() const noexcept { return active_; }
  const std::string& run_id() const noexcept { return run_id_; }
  const std::string& experiment_id() const noexcept { return experiment_id_; }

  void log_params(const nlohmann::json& params) {
    std::lock_guard lock(m_);
    std::vector<std::pair<std::string, nlohmann::json>> leaves;
    detail::flatten_json(params, "", leaves);
    nlohmann::json batch = nlohmann::json::array();
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      std::string v = leaves[i].second.is_string() ? leaves[i].second.get<std::string>() : leaves[i].second.dump();
      if (v.size() > max_param_chars) v.resize(max_param_chars);
      batch.push_back({{"key", leaves[i].first}, {"value", std::move(v)}});
      if (batch.size() == max_params_per_call || i + 1 == leaves.size()) {
        post("runs/log-batch", {{"run_id", run_id_}, {"params", batch}});
        batch = nlohmann::json::array();
      }
    }
  }

  // Every number (and boolean, as 0 or 1) of `record` is a metric at `step`, its key the
  // flattened path ("ranks.1.memory_bytes"); "step" itself and leaves named "rank" (the
  // index of a per-rank entry) are left out.
  void log_metrics(const nlohmann::json& record, long step) {
    std::lock_guard lock(m_);
    if (!active_) return;
    std::vector<std::pair<std::string, nlohmann::json>> leaves;
    detail::flatten_json(record, "", leaves, "rank");
    const long long now = detail::epoch_ms();
    nlohmann::json batch = nlohmann::json::array();
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      const auto& [k, v] = leaves[i];
      if (k != "step" && (v.is_number() || v.is_boolean()))
        batch.push_back({{"key", k},
                         {"value", v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>()},
                         {"timestamp", now},
                         {"step", step}});
      if (!batch.empty() && (batch.size() == max_metrics_per_call || i + 1 == leaves.size())) {
        post("runs/log-batch", {{"run_id", run_id_}, {"metrics", batch}});
        batch = nlohmann::json::array();
      }
    }
  }

  // A file, or every file under a directory, into the run's artifacts under `artifact_dir`
  // (a directory keeps its layout). Only a server that stores artifacts itself (its
  // artifact URI is mlflow-artifacts:, MLflow's default with --artifacts-destination)
  // takes them over HTTP; for another, a warning says where it wants them.
  void log_artifacts(const std::filesystem::path& local, const std::string& artifact_dir = "") {
    std::lock_guard lock(m_);
    if (!active_) return;
    const std::string scheme = "mlflow-artifacts:";
    if (artifact_uri_.rfind(scheme, 0) != 0) {
      warn("the server keeps this run's artifacts at " + artifact_uri_ +
           ", which strata cannot write over HTTP (start `mlflow server` with --artifacts-destination); " +
           local.string() + " was not logged");
      return;
    }
    std::string root = artifact_uri_.substr(scheme.size());  // /1/<run>/artifacts, or //host:port/1/...
    if (root.rfind("//", 0) == 0) root = root.substr(std::min(root.size(), root.find('/', 2)));
    std::vector<std::pair<std::filesystem::path, std::string>> files;
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(local, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(local, ec))
        if (e.is_regular_file()) files.emplace_back(e.path(), fs::relative(e.path(), local).generic_string());
    } else {
      files.emplace_back(local, local.filename().string());
    }
    for (const auto& [path, rel] : files) {
      const std::string to = artifact_dir.empty() ? rel : artifact_dir + "/" + rel;
      const auto r =
          http_->put_file(o_.uri + "/api/2.0/mlflow-artifacts/artifacts" + root + "/" + escape_path(to), path);
      if (!answered(r, "artifact " + to)) return;
    }
  }

  // Ends the run, FINISHED or FAILED; later calls do nothing.
  void finish(bool ok) {
    std::lock_guard lock(m_);
    end(ok ? "FINISHED" : "FAILED");
  }

 private:
  bool start() {
    const auto lookup = [&] {
      return http_->json_request(
          "GET", o_.uri + "/api/2.0/mlflow/experiments/get-by-name?experiment_name=" + escape_query(o_.experiment), "");
    };
    auto got = lookup();
    if (got.status == 0) {
      std::fprintf(stderr,
                   "strata: warning: MLflow tracking server %s cannot be reached (%s); training goes on without it\n",
                   o_.uri.c_str(), got.error.c_str());
      return false;
    }
    nlohmann::json j = parse(got.body);
    if (got.ok() && j.contains("experiment")) {
      experiment_id_ = j["experiment"].value("experiment_id", "");
    } else if (j.value("error_code", "") == "RESOURCE_DOES_NOT_EXIST") {
      auto made = http_->json_request("POST", o_.uri + "/api/2.0/mlflow/experiments/create",
                                      nlohmann::json{{"name", o_.experiment}}.dump());
      // Another job may have created it in between: look it up again.
      if (!made.ok()) made = lookup();
      const nlohmann::json m = parse(made.body);
      experiment_id_ =
          m.contains("experiment") ? m["experiment"].value("experiment_id", "") : m.value("experiment_id", "");
    }
    if (experiment_id_.empty()) {
      std::fprintf(stderr, "strata: warning: MLflow at %s: experiment '%s' neither found nor created (HTTP %ld: %s)\n",
                   o_.uri.c_str(), o_.experiment.c_str(), got.status, got.body.substr(0, 300).c_str());
      return false;
    }
    nlohmann::json body = {{"experiment_id", experiment_id_},
                           {"start_time", detail::epoch_ms()},
                           {"tags", {{{"key", "strata.version"}, {"value", STRATA_VERSION_STRING}}}}};
    if (!o_.run_name.empty()) body["run_name"] = o_.run_name;
    const auto run = http_->json_request("POST", o_.uri + "/api/2.0/mlflow/runs/create", body.dump());
    const nlohmann::json r = parse(run.body);
    if (!run.ok() || !r.contains("run")) {
      std::fprintf(stderr, "strata: warning: MLflow at %s: runs/create failed (HTTP %ld: %s)\n", o_.uri.c_str(),
                   run.status, run.body.substr(0, 300).c_str());
      return false;
    }
    run_id_ = r["run"]["info"].value("run_id", "");
    artifact_uri_ = r["run"]["info"].value("artifact_uri", "");
    active_ = !run_id_.empty();
    return active_;
  }

  void end(const char* status) {
    if (!active_ || ended_) return;
    ended_ = true;
    detail::remove_abort_hook(abort_hook_);
    post("runs/update", {{"run_id", run_id_}, {"status", status}, {"end_time", detail::epoch_ms()}});
  }

  void post(const char* api, const nlohmann::json& body) {
    if (!active_) return;
    answered(http_->json_request("POST", o_.uri + "/api/2.0/mlflow/" + api, body.dump()), api);
  }

  // A failed call is a warning; the third in a row makes the run inactive.
  bool answered(const detail::http_client::response& r, const std::string& what) {
    if (r.ok()) {
      failures_ = 0;
      return true;
    }
    warn(what + " failed (" + (r.status ? "HTTP " + std::to_string(r.status) + ": " + r.body.substr(0, 300) : r.error) +
         ")");
    if (++failures_ >= 3) {
      warn("three calls in a row failed: no more calls to this run (the --metrics file has every step)");
      active_ = false;
    }
    return false;
  }
  void warn(const std::string& what) const {
    std::fprintf(stderr, "strata: warning: MLflow run %s at %s: %s\n", run_id_.c_str(), o_.uri.c_str(), what.c_str());
  }

  static nlohmann::json parse(const std::string& body) {
    return nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  }
  // Percent-encoding: every byte but unreserved ones (and '/' in a path).
  static std::string escape(const std::string& s, bool keep_slash) {
    static const char* hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : s) {
      if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
        out += static_cast<char>(c);
      } else {
        out += '%';
        out += hex[c >> 4];
        out += hex[c & 15];
      }
    }
    return out;
  }
  static std::string escape_query(const std::string& s) { return escape(s, false); }
  static std::string escape_path(const std::string& s) { return escape(s, true); }

  mlflow_options o_;
  std::timed_mutex m_;  // one call at a time: the abort hook runs on another thread
  std::unique_ptr<detail::http_client> http_;
  std::string experiment_id_, run_id_, artifact_uri_;
  bool active_ = false, ended_ = false;
  int failures_ = 0;
  int uncaught_;
  std::uint64_t abort_hook_ = 0;
};

}  // namespace strata
