// ExpectInvalid(f, {"needle", ...}): f() must throw relpos::InvalidArgument
// whose message contains every needle (the argument's name, its value), so
// that a test checks that an error names what is wrong, not only that one
// is thrown.
#ifndef RELPOS_TESTS_SUPPORT_EXPECT_INVALID_H_
#define RELPOS_TESTS_SUPPORT_EXPECT_INVALID_H_

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "relpos/error.h"

namespace relpos {

template <typename F>
void ExpectInvalid(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no InvalidArgument thrown";
  } catch (const InvalidArgument& e) {
    for (const std::string& needle : needles)
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
          << "'" << e.what() << "' lacks '" << needle << "'";
  }
}

}  // namespace relpos

#endif  // RELPOS_TESTS_SUPPORT_EXPECT_INVALID_H_
