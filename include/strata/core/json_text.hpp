// JSON text written by hand, for the few places that must not pull a JSON library into
// every translation unit (the communicators' hang reports and trace events): a quoted
// string and a number.
#pragma once
#include <cstdio>
#include <string>
#include <string_view>

namespace strata::detail {

// Appends s as a JSON string literal.
inline void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += b;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

inline std::string json_string(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

// A finite double as JSON (17 significant digits: it reads back the same).
inline void append_json_number(std::string& out, double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", v);
  out += b;
}

}  // namespace strata::detail
