// Typed exceptions thrown by libdiag. `main` maps them to exit codes; library code never exits.
#pragma once
#include <stdexcept>
#include <string>

namespace lpdiag {

// Base of every error lpdiag raises on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The caller passed something unusable (bad argument, shape, option value).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A file could not be used as asked: missing, not HDF5, not a trace, wrong version, corrupt.
class InputError : public Error {
 public:
  using Error::Error;
};

// Writing failed (disk full, size limit, permissions).
class WriteError : public Error {
 public:
  using Error::Error;
};

}  // namespace lpdiag
