// Image storage and the libpng writer.
#include <png.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "spattn/error.hpp"
#include "spattn/image.hpp"

namespace spattn {

Image::Image(int64_t w, int64_t h, Rgb fill) : width(w), height(h) {
  constexpr int64_t kMax = int64_t(1) << 15;
  SPATTN_CHECK(w >= 1 && w <= kMax && h >= 1 && h <= kMax, "image size ", w, "x", h,
               " outside [1, ", kMax, "] per side");
  pixels.resize(size_t(w * h * 3));
  for (size_t i = 0; i < pixels.size(); i += 3) {
    pixels[i] = fill.r;
    pixels[i + 1] = fill.g;
    pixels[i + 2] = fill.b;
  }
}

Rgb Image::at(int64_t x, int64_t y) const {
  const uint8_t* p = &pixels[size_t((y * width + x) * 3)];
  return {p[0], p[1], p[2]};
}

void Image::set(int64_t x, int64_t y, Rgb c) {
  uint8_t* p = &pixels[size_t((y * width + x) * 3)];
  p[0] = c.r;
  p[1] = c.g;
  p[2] = c.b;
}

void Image::fill_rect(int64_t x, int64_t y, int64_t w, int64_t h, Rgb c) {
  const int64_t x0 = std::max<int64_t>(x, 0), x1 = std::min(x + w, width);
  const int64_t y0 = std::max<int64_t>(y, 0), y1 = std::min(y + h, height);
  for (int64_t yy = y0; yy < y1; ++yy)
    for (int64_t xx = x0; xx < x1; ++xx) set(xx, yy, c);
}

void Image::blit(const Image& src, int64_t x, int64_t y) {
  const int64_t x0 = std::max<int64_t>(x, 0), x1 = std::min(x + src.width, width);
  const int64_t y0 = std::max<int64_t>(y, 0), y1 = std::min(y + src.height, height);
  if (x0 >= x1) return;
  for (int64_t yy = y0; yy < y1; ++yy)
    std::memcpy(&pixels[size_t((yy * width + x0) * 3)],
                &src.pixels[size_t(((yy - y) * src.width + (x0 - x)) * 3)], size_t((x1 - x0) * 3));
}

namespace {

// libpng reports errors by longjmp. Everything between setjmp and the end of write_rows is
// plain C data (no destructors to skip), and the message travels back in a plain buffer.
struct PngFailure {
  char message[256];
};

void on_png_error(png_structp png, png_const_charp msg) {
  auto* f = static_cast<PngFailure*>(png_get_error_ptr(png));
  std::snprintf(f->message, sizeof f->message, "%s", msg ? msg : "unknown libpng error");
  png_longjmp(png, 1);
}

void on_png_warning(png_structp, png_const_charp) {}  // nothing a user could act on

// Returns false with fail->message set when libpng fails.
bool write_rows(FILE* file, const uint8_t* rgb, png_uint_32 w, png_uint_32 h, PngFailure* fail) {
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, fail, on_png_error, on_png_warning);
  if (!png) {
    std::snprintf(fail->message, sizeof fail->message, "libpng could not allocate a writer");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, nullptr);
    std::snprintf(fail->message, sizeof fail->message, "libpng could not allocate its info");
    return false;
  }
  // png and info are not assigned after this point, so they are valid after a longjmp.
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_init_io(png, file);
  png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (png_uint_32 y = 0; y < h; ++y)
    png_write_row(png, const_cast<png_bytep>(rgb + size_t(y) * w * 3));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

void write_png(const Image& img, const std::string& path) {
  SPATTN_CHECK(
      img.width > 0 && img.height > 0 && img.pixels.size() == size_t(img.width * img.height * 3),
      "write_png: image ", img.width, "x", img.height, " holds ", img.pixels.size(), " bytes");
  FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) {
    const int err = errno;
    detail::fail("cannot write '", path, "': ", std::strerror(err));
  }
  PngFailure fail{};
  const bool ok =
      write_rows(file, img.pixels.data(), png_uint_32(img.width), png_uint_32(img.height), &fail);
  // fclose flushes: a full disk may only show up here.
  const bool closed = std::fclose(file) == 0;
  const int err = errno;
  if (ok && closed) return;
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  if (!ok) detail::fail("cannot write PNG '", path, "': ", fail.message);
  detail::fail("cannot write '", path, "': ", std::strerror(err));
}

}  // namespace spattn
