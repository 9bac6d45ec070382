// Token files in llm.c's layout, memory-mapped: a 256 x int32 header (magic, version,
// token count) and the tokens, uint16 (magic 20240520, version 1) or uint32 (20240801, 7).
#pragma once
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "../core/error.hpp"

namespace strata {

class token_file {
 public:
  static constexpr std::int32_t magic_u16 = 20240520, version_u16 = 1;
  static constexpr std::int32_t magic_u32 = 20240801, version_u32 = 7;
  static constexpr std::size_t header_ints = 256;
  static constexpr std::size_t header_bytes = header_ints * sizeof(std::int32_t);

  // Maps the file and checks its header; a file that is not one, or whose header counts
  // more tokens than it holds, is a checkpoint_error naming the file and the offset.
  explicit token_file(const std::filesystem::path& path) : path_(path.string()) {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw checkpoint_error(cat(path_, ": cannot open: ", detail::errno_text(errno)));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int e = errno;
      ::close(fd);
      throw checkpoint_error(cat(path_, ": cannot stat: ", detail::errno_text(e)));
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      const int e = errno;
      ::close(fd);
      if (p == MAP_FAILED) throw checkpoint_error(cat(path_, ": cannot map: ", detail::errno_text(e)));
      data_ = static_cast<const unsigned char*>(p);
    } else {
      ::close(fd);
    }
    check_header();
  }
  token_file(const token_file&) = delete;
  token_file& operator=(const token_file&) = delete;
  token_file(token_file&& o) noexcept
      : path_(std::move(o.path_)),
        data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        count_(o.count_),
        width_(o.width_) {}
  ~token_file() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
  }

  const std::string& path() const noexcept { return path_; }
  std::uint64_t size() const noexcept { return count_; }  // tokens
  std::size_t token_bytes() const noexcept { return width_; }

  // Token i (i < size()).
  std::uint32_t operator[](std::uint64_t i) const noexcept {
    const unsigned char* p = data_ + header_bytes + i * width_;
    if (width_ == 2) {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }

  // The byte offset of token i in the file, for messages.
  std::uint64_t offset_of(std::uint64_t i) const noexcept { return header_bytes + i * width_; }

  // The first token that is not below `limit` (a vocabulary), as an error naming the file
  // and the offset; checked once when a run starts.
  void check_below(std::uint64_t limit, std::string_view what = "vocab size") const {
    for (std::uint64_t i = 0; i < count_; ++i)
      if ((*this)[i] >= limit)
        throw checkpoint_error(cat(path_, ": token ", (*this)[i], " at offset ", offset_of(i), " (token ", i,
                                   ") is not below the ", what, " ", limit));
  }

 private:
  void check_header() {
    if (size_ < header_bytes)
      throw checkpoint_error(cat(path_, ": ", size_, " bytes, shorter than the ", header_bytes,
                                 "-byte header of a token file (llm.c layout)"));
    std::int32_t h[3];
    std::memcpy(h, data_, sizeof h);
    if (h[0] == magic_u16 && h[1] == version_u16) {
      width_ = 2;
    } else if (h[0] == magic_u32 && h[1] == version_u32) {
      width_ = 4;
    } else {
      throw checkpoint_error(cat(path_, ": magic ", h[0], " version ", h[1], " at offset 0 is not a token file (",
                                 magic_u16, "/", version_u16, " for uint16 tokens, ", magic_u32, "/", version_u32,
                                 " for uint32)"));
    }
    if (h[2] < 0) throw checkpoint_error(cat(path_, ": token count ", h[2], " at offset 8 is negative"));
    count_ = static_cast<std::uint64_t>(h[2]);
    const std::uint64_t holds = (size_ - header_bytes) / width_;
    if (count_ > holds)
      throw checkpoint_error(cat(path_, ": the header (offset 8) counts ", count_, " tokens, the file holds ", holds,
                                 " (", size_, " bytes): truncated?"));
  }

  std::string path_;
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
  std::uint64_t count_ = 0;
  std::size_t width_ = 2;
};

}  // namespace strata
