// tests/support/scoped_env.hpp - restores an environment variable when it
// goes out of scope (the value it had, or unset), so a test may set it:
//
//   xshard_test::scoped_env restore("XSHARD_MESH_THREADS");
//   setenv("XSHARD_MESH_THREADS", "3", 1);
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace xshard_test {

class scoped_env {
 public:
  explicit scoped_env(std::string name) : name_(std::move(name)) {
    if (const char* v = std::getenv(name_.c_str())) saved_ = v;
  }
  ~scoped_env() {
    if (saved_)
      setenv(name_.c_str(), saved_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

}  // namespace xshard_test
