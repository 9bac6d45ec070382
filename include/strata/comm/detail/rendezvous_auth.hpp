// The job secret of a rendezvous: read from STRATA_JOB_SECRET or the file that
// STRATA_JOB_SECRET_FILE names, and proved, never sent, by an HMAC-SHA256 over both
// sides' nonces (OpenSSL's: libcrypto). A build without OpenSSL admits no secret.
#pragma once
#include <array>
#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <span>
#include <string>

#include "../../core/config.hpp"
#include "../../core/error.hpp"
#if STRATA_HAS_OPENSSL
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#endif

namespace strata::detail {

inline constexpr std::size_t nonce_bytes = 16, proof_bytes = 32;
using rendezvous_nonce = std::array<unsigned char, nonce_bytes>;
using rendezvous_proof = std::array<unsigned char, proof_bytes>;

// The secret every rank of the job must hold, or empty (the rendezvous is open).
inline std::string job_secret_from_env() {
  const char* inline_secret = std::getenv("STRATA_JOB_SECRET");
  const char* file = std::getenv("STRATA_JOB_SECRET_FILE");
  const bool has_inline = inline_secret && *inline_secret, has_file = file && *file;
  expects<config_error>(!(has_inline && has_file),
                        "STRATA_JOB_SECRET and STRATA_JOB_SECRET_FILE are both set: set one of them");
  std::string secret;
  if (has_inline) secret = inline_secret;
  if (has_file) {
    std::ifstream in(file, std::ios::binary);
    expects<config_error>(in.good(), [&] { return cat("STRATA_JOB_SECRET_FILE=", file, ": cannot read the file"); });
    secret.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
    expects<config_error>(!secret.empty(), [&] { return cat("STRATA_JOB_SECRET_FILE=", file, ": the file is empty"); });
  }
#if !STRATA_HAS_OPENSSL
  expects<config_error>(secret.empty(),
                        "STRATA_JOB_SECRET is set, and strata was built without OpenSSL, which proves it; install "
                        "OpenSSL's development files (Debian: libssl-dev) and rebuild");
#endif
  return secret;
}

inline rendezvous_nonce make_nonce() {
  rendezvous_nonce n{};
#if STRATA_HAS_OPENSSL
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) == 1) return n;
#endif
  std::random_device rd;  // without OpenSSL no secret is proved: the nonce only has to differ
  for (auto& b : n) b = static_cast<unsigned char>(rd());
  return n;
}

// HMAC-SHA256 under `secret` of the parts, in order (each prefixed by its length, so that
// no two different sequences give the same input).
template <class... Parts>
rendezvous_proof prove(const std::string& secret, const Parts&... parts) {
  rendezvous_proof out{};
#if STRATA_HAS_OPENSSL
  std::string input;
  const auto add = [&](std::span<const unsigned char> p) {
    const auto n = static_cast<std::uint32_t>(p.size());
    for (int i = 3; i >= 0; --i) input.push_back(static_cast<char>((n >> (8 * i)) & 0xffu));
    input.append(reinterpret_cast<const char*>(p.data()), p.size());
  };
  (add(std::span<const unsigned char>(reinterpret_cast<const unsigned char*>(std::data(parts)),
                                      std::size(parts) * sizeof(*std::data(parts)))),
   ...);
  unsigned int len = 0;
  const unsigned char* r = HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
                                reinterpret_cast<const unsigned char*>(input.data()), input.size(), out.data(), &len);
  expects<comm_error>(r != nullptr && len == out.size(), "rendezvous: OpenSSL's HMAC-SHA256 failed");
#else
  (void)secret;
  ((void)parts, ...);
#endif
  return out;
}

// Constant-time comparison of two proofs.
inline bool proofs_equal(const rendezvous_proof& a, const rendezvous_proof& b) {
#if STRATA_HAS_OPENSSL
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
#else
  unsigned char d = 0;
  for (std::size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
#endif
}

}  // namespace strata::detail
