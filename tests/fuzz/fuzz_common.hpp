// tests/fuzz/fuzz_common.hpp - what every fuzz target shares: a property
// check that stops the run with a message, and the error contract of the
// run-time parsers (a rejected input throws xshard::error and nothing else).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>  // the name of an unexpected exception's type
#include <utility>
#include <xshard/core/error.hpp>

namespace fuzz {

/// Stops the run (libFuzzer saves the input as a crash) when a property fails.
[[noreturn]] inline void property_failed(const char* what, std::string_view detail = {}) {
  std::fprintf(stderr, "\n*** property failed: %s\n", what);
  if (!detail.empty()) std::fprintf(stderr, "    %.*s\n", static_cast<int>(detail.size()), detail.data());
  std::fflush(stderr);
  std::abort();
}

inline void check(bool ok, const char* what, std::string_view detail = {}) {
  if (!ok) property_failed(what, detail);
}

/// Runs f(). Returns true if it returned, false if it threw xshard::error
/// (whose message must be one "xshard..." sentence); any other exception
/// fails the property.
template <class F>
bool accepts(F&& f) {
  try {
    f();
    return true;
  } catch (const xshard::error& e) {
    const std::string_view msg = e.what();
    check(msg.substr(0, 6) == "xshard", "an xshard::error message starts with \"xshard\"", msg);
    return false;
  } catch (const std::exception& e) {
    const std::string detail = std::string(typeid(e).name()) + ": " + e.what();
    property_failed("only xshard::error may be thrown", detail);
  } catch (...) {
    property_failed("only xshard::error may be thrown (a non-std exception escaped)");
  }
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

/// Splits `text` at the first `sep`: {before, after}; `after` is empty when
/// there is no separator. (Callers copy the halves into named string_views:
/// Clang 14 cannot capture structured bindings in lambdas.)
inline std::pair<std::string_view, std::string_view> split_once(std::string_view text, char sep) {
  const std::size_t at = text.find(sep);
  if (at == std::string_view::npos) return {text, {}};
  return {text.substr(0, at), text.substr(at + 1)};
}

}  // namespace fuzz
