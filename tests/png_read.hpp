// Reads a PNG back with libpng's simplified API, independently of spattn's writer.
#pragma once
#include <png.h>

#include <cstdint>
#include <string>
#include <vector>

namespace spattn::test {

struct PngPixels {
  bool ok = false;
  std::string error;
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // 3 bytes per pixel, rows top to bottom
};

inline PngPixels read_png_rgb(const std::string& path) {
  PngPixels r;
  png_image im{};
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&im, path.c_str())) {
    r.error = im.message;
    return r;
  }
  im.format = PNG_FORMAT_RGB;
  r.rgb.resize(PNG_IMAGE_SIZE(im));
  if (!png_image_finish_read(&im, nullptr, r.rgb.data(), 0, nullptr)) {
    r.error = im.message;
    png_image_free(&im);
    return r;
  }
  r.ok = true;
  r.width = im.width;
  r.height = im.height;
  return r;
}

}  // namespace spattn::test
