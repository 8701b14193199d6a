// Argument-checking macros: build a message with operator<< and throw the
// matching relpos exception. Every message starts with "relpos: ".
#ifndef RELPOS_SRC_BASE_CHECK_H_
#define RELPOS_SRC_BASE_CHECK_H_

#include <sstream>

#include "relpos/error.h"

#define RELPOS_THROW(ExceptionType, message_stream)      \
  do {                                                   \
    std::ostringstream relpos_check_os_;                 \
    relpos_check_os_ << "relpos: " << message_stream;    \
    throw ::relpos::ExceptionType(relpos_check_os_.str()); \
  } while (0)

// Throws InvalidArgument unless `condition` holds.
#define RELPOS_CHECK_ARG(condition, message_stream)                 \
  do {                                                              \
    if (!(condition)) RELPOS_THROW(InvalidArgument, message_stream); \
  } while (0)

#endif  // RELPOS_SRC_BASE_CHECK_H_
