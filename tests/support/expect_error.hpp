// tests/support/expect_error.hpp - the one way the tests check an
// xshard::error and its words.
//
//   #include "../support/expect_error.hpp"
//
//   EXPECT_XSHARD_ERROR((void)xshard::softmax(x, 2), {"dim 2", "rank 2"});
//   EXPECT_XSHARD_ERROR((f<a, b>(x)), {"..."});   // a top-level comma: parenthesise
//   EXPECT_EQ(xshard_test::error_of([&] { r.read("a", t); }), "xshard: checkpoint ...");
//
// EXPECT_XSHARD_ERROR fails (non-fatally) when the statement throws nothing,
// throws something that is not an xshard::error, or throws an xshard::error
// whose message does not start with "xshard" or lacks one of the words; the failure shows the statement, the
// message and every missing word. error_of returns the message, "no error"
// when nothing is thrown, for tests that compare the whole text. Other
// exception types propagate (a test that expects them says so with
// EXPECT_THROW).
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <xshard/core/error.hpp>

namespace xshard_test {

/// The message of the xshard::error that f() throws, or "no error".
template <class F>
std::string error_of(F&& f) {
  try {
    static_cast<F&&>(f)();
  } catch (const xshard::error& e) {
    return e.what();
  }
  return "no error";
}

/// Success when f() throws an xshard::error whose message holds every word.
template <class F>
::testing::AssertionResult throws_error_with(const char* statement, F&& f,
                                             std::initializer_list<std::string_view> words) {
  std::string what;
  try {
    static_cast<F&&>(f)();
    return ::testing::AssertionFailure() << statement << "\n  threw no error";
  } catch (const xshard::error& e) {
    what = e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << statement << "\n  threw another exception: " << e.what();
  }
  if (!what.starts_with("xshard"))
    return ::testing::AssertionFailure() << statement << "\n  message does not start with \"xshard\": " << what;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  bool missing = false;
  for (const std::string_view w : words)
    if (what.find(w) == std::string::npos) {
      if (!missing) result = ::testing::AssertionFailure() << statement << "\n  message: " << what;
      missing = true;
      result << "\n  lacks: " << w;
    }
  return result;
}

template <class F>
::testing::AssertionResult throws_error_with(const char* statement, F&& f, std::string_view word) {
  return throws_error_with(statement, static_cast<F&&>(f), {word});
}

}  // namespace xshard_test

/// EXPECT_XSHARD_ERROR(statement, {"word", ...}): see the file's comment.
#define EXPECT_XSHARD_ERROR(statement, ...)     \
  EXPECT_TRUE(::xshard_test::throws_error_with( \
      #statement, [&] { statement; }, __VA_ARGS__))
