// POSIX file helpers for checkpoints: whole writes and positioned reads that report the
// file on failure, fsync of files and directories, and a fast 64-bit checksum.
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../../core/error.hpp"

namespace strata::detail {

// A 64-bit checksum over 8-byte words (a multiply-xorshift mix, the tail bytes, the
// length): several GB/s, so verifying a checkpoint costs about as much as reading it.
// Streaming: update() in any pieces gives the same value as one call over the whole.
class checksum64_stream {
 public:
  void update(const void* data, std::size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    total_ += n;
    while (n > 0 && fill_ > 0) {  // complete a word left over from the last piece
      word_[fill_++] = *p++;
      --n;
      if (fill_ == 8) mix_word(word_), fill_ = 0;
    }
    for (; n >= 8; p += 8, n -= 8) mix_word(p);
    while (n > 0) word_[fill_++] = *p++, --n;
  }
  std::uint64_t finish() const {
    std::uint64_t h = h_;
    for (std::size_t i = 0; i < fill_; ++i) h = (h ^ word_[i]) * 0x100000001b3ull;
    return h ^ total_;
  }

 private:
  void mix_word(const unsigned char* p) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    h_ ^= w;
    h_ *= 0xff51afd7ed558ccdull;
    h_ ^= h_ >> 32;
  }
  std::uint64_t h_ = 0x9e3779b97f4a7c15ull, total_ = 0;
  unsigned char word_[8] = {};
  std::size_t fill_ = 0;
};

class posix_file {
 public:
  posix_file(const std::string& path, int flags, mode_t mode = 0644) : path_(path) {
    fd_ = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    if (fd_ < 0) throw checkpoint_error(cat(path, ": cannot open: ", std::strerror(errno)));
  }
  posix_file(const posix_file&) = delete;
  posix_file& operator=(const posix_file&) = delete;
  ~posix_file() {
    if (fd_ >= 0) ::close(fd_);
  }

  void write_all(const void* data, std::size_t n) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) throw checkpoint_error(cat(path_, ": write failed: ", std::strerror(errno)));
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  void read_at(void* data, std::size_t n, std::size_t offset) const {
    auto* p = static_cast<char*>(data);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0)
        throw checkpoint_error(cat(path_, ": read of ", n, " bytes at offset ", offset, " failed (truncated file?)"));
      p += r;
      n -= static_cast<std::size_t>(r);
      offset += static_cast<std::size_t>(r);
    }
  }
  void sync() {
    if (::fsync(fd_) != 0) throw checkpoint_error(cat(path_, ": fsync failed: ", std::strerror(errno)));
  }
  std::size_t size() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw checkpoint_error(cat(path_, ": stat failed: ", std::strerror(errno)));
    return static_cast<std::size_t>(st.st_size);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// checksum64_stream of a file's first `bytes` bytes, read 1 MiB at a time: verifying a
// shard holds one chunk, not the shard.
inline std::uint64_t file_checksum64(const posix_file& f, std::size_t bytes) {
  constexpr std::size_t chunk = std::size_t{1} << 20;
  std::vector<char> buf(std::min(bytes, chunk));
  checksum64_stream h;
  for (std::size_t at = 0; at < bytes; at += buf.size()) {
    const std::size_t n = std::min(buf.size(), bytes - at);
    f.read_at(buf.data(), n, at);
    h.update(buf.data(), n);
  }
  return h.finish();
}

// Makes a rename or a new file in `dir` durable.
inline void sync_directory(const std::filesystem::path& dir) {
  posix_file d(dir.string(), O_RDONLY | O_DIRECTORY);
  d.sync();
}

// Writes text to path atomically: a temporary file, fsync, rename, fsync of the directory.
inline void write_file_atomic(const std::filesystem::path& path, const std::string& text) {
  const auto tmp = path.string() + ".tmp";
  {
    posix_file f(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    f.write_all(text.data(), text.size());
    f.sync();
  }
  std::filesystem::rename(tmp, path);
  sync_directory(path.parent_path());
}

inline std::string read_text_file(const std::filesystem::path& path) {
  posix_file f(path.string(), O_RDONLY);
  std::string s(f.size(), '\0');
  if (!s.empty()) f.read_at(s.data(), s.size(), 0);
  return s;
}

}  // namespace strata::detail
