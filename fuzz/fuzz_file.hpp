// The npy and safetensors readers take a path: the fuzz input is written to an in-memory
// file (memfd) once per run and read back through /proc/self/fd, so no disk is touched.
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace spattn::fuzz {

inline const std::string& input_path(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("spattn_fuzz", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (fd < 0) std::abort();
  if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != ssize_t(size))) std::abort();
  return path;
}

}  // namespace spattn::fuzz
