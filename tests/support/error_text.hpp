// What a call throws, as text, for tests that check an error's message.
#pragma once
#include <string>

namespace strata_test {

// The what() of the Error that f() throws, or "(no Error)" when it throws none.
template <class Error, class F>
std::string error_text_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error of the expected type)";
}

inline bool has_text(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace strata_test
