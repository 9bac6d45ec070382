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

// Writes `path` so that readers see either the old file or the complete new one: the
// content goes to a temporary file in the same directory, which is fsynced and renamed
// over `path`; the directory is fsynced so the rename survives a crash. On any failure
// the temporary file is removed and `path` is untouched.
inline void atomic_write(const std::filesystem::path& path, const std::function<void(write_sink&)>& fill) {
  static std::atomic<unsigned> counter{0};
  const std::string target = path.string();
  const std::filesystem::path tmp =
      path.parent_path() / cat(".", path.filename().string(), ".tmp.", ::getpid(), ".", counter++);
  const std::string tmp_s = tmp.string();
  const int fd = ::open(tmp_s.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw checkpoint_error(cat(target, ": cannot create temporary file ", tmp_s, ": ", errno_text(errno)));
  bool open = true;
  try {
    write_sink sink(fd, target);
    fill(sink);
    if (::fsync(fd) != 0) throw checkpoint_error(cat(target, ": fsync failed: ", errno_text(errno)));
    open = false;  // close releases the descriptor even when it reports an error
    if (::close(fd) != 0) throw checkpoint_error(cat(target, ": close failed: ", errno_text(errno)));
  } catch (...) {
    if (open) ::close(fd);
    ::unlink(tmp_s.c_str());
    throw;
  }
  if (::rename(tmp_s.c_str(), target.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_s.c_str());
    throw checkpoint_error(cat(target, ": cannot rename the temporary file into place: ", errno_text(e)));
  }
  fsync_directory(path.parent_path(), target);
}

}  // namespace strata::detail
