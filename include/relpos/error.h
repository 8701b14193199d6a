// Error types used everywhere in relpos.
//
// relpos reports every failure by throwing one of the classes below (never by
// aborting, returning NaN or a status code). Messages name the offending
// argument and its value, e.g. "relpos: max_distance must be >= 0 (got -3)".
#ifndef RELPOS_ERROR_H_
#define RELPOS_ERROR_H_

#include <stdexcept>
#include <string>

namespace relpos {

// Base class of every exception relpos throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A function was called with an argument it does not accept (wrong shape,
// out-of-range option, inconsistent sizes). Python maps it to ValueError.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A file could not be opened, read, written or renamed.
class IoError : public Error {
 public:
  using Error::Error;
};

// A file was read but its contents are malformed (bad header, inconsistent
// shapes, unknown dtype): untrusted input is rejected with this.
class FormatError : public Error {
 public:
  using Error::Error;
};

// An operation needs more of a resource than this process may use: a model,
// batch or grid whose planned memory exceeds the limit (docs/robustness.md,
// "Memory"). Python maps it to MemoryError.
class ResourceError : public Error {
 public:
  using Error::Error;
};

// A computation produced or was given a non-finite value.
class NumericalError : public Error {
 public:
  using Error::Error;
};

// A relpos message without its "relpos: " prefix, for callers that put the
// message inside their own ("--config cfg.json: <message>").
inline std::string MessageBody(const std::exception& e) {
  const std::string message = e.what();
  const std::string prefix = "relpos: ";
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size())
                                       : message;
}

}  // namespace relpos

#endif  // RELPOS_ERROR_H_
