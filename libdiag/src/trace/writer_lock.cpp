#include "lpdiag/trace/writer_lock.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lpdiag/error.hpp"

namespace lpdiag {
namespace {
struct flock first_byte(short type) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  return fl;
}
}  // namespace

WriterLock WriterLock::if_exists(const std::string& path) {
  const int probe = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (probe < 0 && errno == ENOENT) return WriterLock();
  if (probe >= 0) ::close(probe);
  return WriterLock(path);
}

WriterLock::WriterLock(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw WriteError(path + ": cannot open the trace for writing (" + std::strerror(errno) + ")");
  struct flock fl = first_byte(F_WRLCK);
  if (fcntl(fd_, F_OFD_SETLK, &fl) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EAGAIN || err == EACCES)
      throw WriteError(path + ": another writer is recording this trace now; it was left untouched (give this run another path, "
                              "or stop the other one first)");
    throw WriteError(path + ": cannot lock the trace for writing (" + std::strerror(err) + ")");
  }
}

WriterLock::~WriterLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the description releases the lock
}

bool WriterLock::held_by_another(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct flock fl = first_byte(F_WRLCK);
  const bool held = fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
  ::close(fd);
  return held;
}

}  // namespace lpdiag
