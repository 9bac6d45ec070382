// POSIX file access for strata's file formats: a read-only file with exact positional
// reads, and an atomic write (temporary file, fsync, rename, fsync of the directory).
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "../../core/error.hpp"

namespace strata::detail {

// A file opened for reading; every read is positional and exact, so a file that shrinks
// while it is open is reported instead of yielding short data.
class read_file {
 public:
  read_file() = default;
  explicit read_file(const std::filesystem::path& p) : path_(p.string()) {
    do fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0) throw checkpoint_error(cat(path_, ": cannot open for reading: ", errno_text(errno)));
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int e = errno;
      ::close(fd_);
      throw checkpoint_error(cat(path_, ": cannot stat: ", errno_text(e)));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw checkpoint_error(cat(path_, ": not a regular file"));
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  read_file(read_file&& o) noexcept : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)), size_(o.size_) {}
  read_file& operator=(read_file&& o) noexcept {
    if (this != &o) {
      close();
      path_ = std::move(o.path_);
      fd_ = std::exchange(o.fd_, -1);
      size_ = o.size_;
    }
    return *this;
  }
  read_file(const read_file&) = delete;
  read_file& operator=(const read_file&) = delete;
  ~read_file() { close(); }

  const std::string& path() const noexcept { return path_; }
  std::uint64_t size() const noexcept { return size_; }

  // Reads exactly out.size() bytes at `offset`.
  void read_at(std::uint64_t offset, std::span<std::byte> out) const {
    std::size_t done = 0;
    while (done < out.size()) {
      const ssize_t r = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw checkpoint_error(cat(path_, ": read failed at byte ", offset + done, ": ", errno_text(errno)));
      if (r == 0)
        throw checkpoint_error(cat(path_, ": unexpected end of file at byte ", offset + done, " (the file was ", size_,
                                   " bytes when opened; was it truncated?)"));
      done += static_cast<std::size_t>(r);
    }
  }

 private:
  void close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// The sink an atomic_write callback writes through.
class write_sink {
 public:
  write_sink(int fd, const std::string& path) : fd_(fd), path_(path) {}
  void write(std::span<const std::byte> bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t r = ::write(fd_, bytes.data() + done, bytes.size() - done);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw checkpoint_error(cat(path_, ": write failed: ", errno_text(errno)));
      done += static_cast<std::size_t>(r);
    }
    written_ += bytes.size();
  }
  // Writes at a byte offset of the file, wherever the sequential writes have got to.
  void write_at(std::uint64_t offset, std::span<const std::byte> bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t r = ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) throw checkpoint_error(cat(path_, ": write at byte ", offset + done, " failed: ", errno_text(errno)));
      done += static_cast<std::size_t>(r);
    }
  }
  std::uint64_t written() const noexcept { return written_; }

 private:
  int fd_;
  const std::string& path_;
  std::uint64_t written_ = 0;
};

inline void fsync_directory(const std::filesystem::path& dir, const std::string& for_path) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw checkpoint_error(cat(for_path, ": cannot open its directory to fsync: ", errno_text(errno)));
  const int r = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  // Some file systems (tmpfs on old kernels, some FUSE mounts) refuse fsync on a directory.
  if (r != 0 && e != EINVAL && e != ENOTSUP)
    throw checkpoint_error(cat(for_path, ": fsync of its directory failed: ", errno_text(e)));
}

// A file that becomes `path` at once: written under a temporary name in the same
// directory (sequentially or at offsets, through sink()), then commit() fsyncs it, renames
// it over `path` and fsyncs the directory so the rename survives a crash. Destroyed
// without commit (a failure on the way), the temporary file is removed and `path` is
// untouched: readers see the old file or the complete new one.
class staged_file {
 public:
  explicit staged_file(const std::filesystem::path& path)
      : path_(path), target_(path.string()), tmp_(temporary_name(path)) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) throw checkpoint_error(cat(target_, ": cannot create temporary file ", tmp_, ": ", errno_text(errno)));
    sink_.emplace(fd_, target_);
  }
  staged_file(const staged_file&) = delete;
  staged_file& operator=(const staged_file&) = delete;
  ~staged_file() {
    if (committed_) return;
    if (fd_ >= 0) ::close(fd_);
    ::unlink(tmp_.c_str());
  }

  write_sink& sink() { return *sink_; }

  void commit() {
    if (::fsync(fd_) != 0) throw checkpoint_error(cat(target_, ": fsync failed: ", errno_text(errno)));
    const int fd = std::exchange(fd_, -1);  // close releases the descriptor even when it reports an error
    if (::close(fd) != 0) throw checkpoint_error(cat(target_, ": close failed: ", errno_text(errno)));
    if (::rename(tmp_.c_str(), target_.c_str()) != 0)
      throw checkpoint_error(cat(target_, ": cannot rename the temporary file into place: ", errno_text(errno)));
    committed_ = true;
    fsync_directory(path_.parent_path(), target_);
  }

 private:
  static std::string temporary_name(const std::filesystem::path& path) {
    static std::atomic<unsigned> counter{0};
    return (path.parent_path() / cat(".", path.filename().string(), ".tmp.", ::getpid(), ".", counter++)).string();
  }

  std::filesystem::path path_;
  std::string target_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
  std::optional<write_sink> sink_;
};

// Writes `path` atomically (see staged_file) with what `fill` writes through the sink.
inline void atomic_write(const std::filesystem::path& path, const std::function<void(write_sink&)>& fill) {
  staged_file f(path);
  fill(f.sink());
  f.commit();
}

}  // namespace strata::detail
