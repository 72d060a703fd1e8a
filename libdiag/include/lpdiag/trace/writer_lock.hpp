// The exclusive writer lock of a trace file: an open-file-description write lock (fcntl
// F_OFD_SETLK) on its first byte, held for the writer's lifetime. A second writer on the same
// path, in this process or another, is refused before it truncates anything. HDF5's own file
// locking (flock) is released when a writer switches to SWMR, and flock and fcntl locks do not
// interact on Linux, so SWMR readers are never blocked by this one.
#pragma once
#include <string>

namespace lpdiag {

class WriterLock {
 public:
  // Creates the file if absent (never truncates it). Throws WriteError when another writer holds
  // the lock or the file cannot be opened.
  explicit WriterLock(const std::string& path);
  // The lock of an existing file only: absent, nothing is created and nothing is held (holds() false).
  static WriterLock if_exists(const std::string& path);
  WriterLock(WriterLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  bool holds() const { return fd_ >= 0; }
  ~WriterLock();
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

  // True when some writer holds the lock on `path` now (false when the file does not exist).
  static bool held_by_another(const std::string& path);

 private:
  WriterLock() = default;
  int fd_ = -1;
};

}  // namespace lpdiag
