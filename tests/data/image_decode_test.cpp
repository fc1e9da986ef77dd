// decode_image and augment_image (engine/src/data/image_decode.h), and the
// image_folder data source over them, on real files: every JPEG and PNG
// here is written by libjpeg or libpng in the test itself, from pixels the
// test knows, then decoded and compared.
#include "data/data_test_support.h"
#include "data/image_decode.h"

#include <bagua/data_files.h>

#include <ATen/ATen.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <jpeglib.h>
#include <png.h>

namespace bagua::image_decode_test {
namespace {

using data::augment_image;
using data::augment_seed;
using data::decode_image;
using data::ImageError;
using data::ImageGeometry;
using testing::TempDir;
using testing::write_file;

// Interleaved 8-bit pixels of a test image.
struct Image {
  int width = 0;
  int height = 0;
  int channels = 0;
  std::vector<uint8_t> data;  // HWC
  uint8_t& at(int y, int x, int c) { return data[static_cast<size_t>((y * width + x) * channels + c)]; }
  uint8_t at(int y, int x, int c) const { return data[static_cast<size_t>((y * width + x) * channels + c)]; }
};

Image make_image(int width, int height, int channels, const std::function<int(int, int, int)>& value) {
  Image img{width, height, channels, std::vector<uint8_t>(static_cast<size_t>(width * height * channels))};
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) img.at(y, x, c) = static_cast<uint8_t>(value(y, x, c));
    }
  }
  return img;
}

// Reproducible noise: an LCG's high bits.
Image noise_image(int width, int height, int channels, uint32_t seed) {
  uint32_t state = seed * 2654435761u + 1;
  return make_image(width, height, channels, [&](int, int, int) {
    state = state * 1664525u + 1013904223u;
    return static_cast<int>(state >> 24);
  });
}

Image smooth_image(int width, int height) {
  return make_image(width, height, 3, [](int y, int x, int c) { return c == 0 ? 40 + x * 2 : c == 1 ? 30 + y * 3 : 100 + (x + y); });
}

// The expected [C, H, W] tensor of an image.
at::Tensor chw_of(const Image& img) {
  at::Tensor hwc = at::empty({img.height, img.width, img.channels}, at::kByte);
  std::memcpy(hwc.data_ptr<uint8_t>(), img.data.data(), img.data.size());
  return hwc.permute({2, 0, 1}).contiguous();
}

ImageGeometry geometry(int64_t channels, int64_t height, int64_t width, int64_t resize = 0) {
  ImageGeometry g;
  g.channels = channels;
  g.height = height;
  g.width = width;
  g.resize = resize;
  return g;
}

// ------------------------------------------------------------ writers

// A baseline (or progressive) JPEG at `quality`; 4 channels are written as CMYK.
void write_jpeg(const std::string& path, const Image& img, int quality = 95, bool progressive = false) {
  FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) throw std::runtime_error("cannot write " + path);
  jpeg_compress_struct cinfo;
  jpeg_error_mgr errors;
  cinfo.err = jpeg_std_error(&errors);
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, file);
  cinfo.image_width = static_cast<JDIMENSION>(img.width);
  cinfo.image_height = static_cast<JDIMENSION>(img.height);
  cinfo.input_components = img.channels;
  cinfo.in_color_space = img.channels == 1 ? JCS_GRAYSCALE : img.channels == 3 ? JCS_RGB : JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  if (progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(img.width * img.channels));
  while (cinfo.next_scanline < cinfo.image_height) {
    const size_t offset = static_cast<size_t>(cinfo.next_scanline) * row.size();
    std::memcpy(row.data(), img.data.data() + offset, row.size());
    JSAMPROW pointer = row.data();
    jpeg_write_scanlines(&cinfo, &pointer, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(file);
}

// A PNG through libpng's simplified API: `format` is a PNG_FORMAT_*,
// `pixels` its rows (16-bit samples for the LINEAR formats, palette
// indices with `colormap` for the COLORMAP ones).
void write_png(const std::string& path, int width, int height, png_uint_32 format, const void* pixels,
               const void* colormap = nullptr, png_uint_32 colormap_entries = 0) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = format;
  image.colormap_entries = colormap_entries;
  if (!png_image_write_to_file(&image, path.c_str(), 0, pixels, 0, colormap)) {
    throw std::runtime_error(std::string("libpng: ") + image.message);
  }
}

void write_png(const std::string& path, const Image& img) {
  const png_uint_32 format = img.channels == 1 ? PNG_FORMAT_GRAY : img.channels == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_RGBA;
  write_png(path, img.width, img.height, format, img.data.data());
}

// An Adam7-interlaced 8-bit gray PNG through libpng's own API (the
// simplified one writes no interlaced files). Only pointers live here, so
// libpng's longjmp on an error skips nothing.
bool write_interlaced_gray_png(FILE* file, int width, int height, png_bytepp rows) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!info) return false;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_init_io(png, file);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8, PNG_COLOR_TYPE_GRAY,
               PNG_INTERLACE_ADAM7, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

void write_interlaced_png(const std::string& path, Image img) {
  std::vector<png_bytep> rows;
  for (int y = 0; y < img.height; ++y) rows.push_back(&img.at(y, 0, 0));
  FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) throw std::runtime_error("cannot write " + path);
  bool ok = write_interlaced_gray_png(file, img.width, img.height, rows.data());
  std::fclose(file);
  if (!ok) throw std::runtime_error("libpng could not write " + path);
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The first half of `path`'s bytes, written to `to`.
void write_first_half(const std::string& path, const std::string& to) {
  std::string bytes = read_bytes(path);
  testing::write_file(to, bytes.substr(0, bytes.size() / 2));
}

double mean_abs_error(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().mean().item<double>();
}

// The ImageError message of decoding `path`, or "" (a failed expectation)
// when it decodes.
std::string decode_error(const std::string& path, const ImageGeometry& g) {
  try {
    decode_image(path, g);
  } catch (const ImageError& e) {
    return e.what();
  }
  ADD_FAILURE() << path << " decoded without an ImageError";
  return "";
}

class ImageDecodeTest : public ::testing::Test {
 protected:
  TempDir dir_;
};

// ------------------------------------------------------------------ PNG

TEST_F(ImageDecodeTest, PngRoundTripIsExact) {
  Image img = noise_image(17, 13, 3, 1);
  write_png(dir_.file("rgb.png"), img);
  at::Tensor got = decode_image(dir_.file("rgb.png"), geometry(3, 13, 17));
  EXPECT_EQ(got.scalar_type(), at::kByte);
  EXPECT_TRUE(got.equal(chw_of(img)));
}

TEST_F(ImageDecodeTest, GrayPngRepeatsIntoThreeChannels) {
  Image img = noise_image(9, 7, 1, 2);
  write_png(dir_.file("gray.png"), img);
  at::Tensor got = decode_image(dir_.file("gray.png"), geometry(3, 7, 9));
  ASSERT_EQ(got.sizes(), (at::IntArrayRef{3, 7, 9}));
  at::Tensor gray = chw_of(img);
  for (int64_t c = 0; c < 3; ++c) EXPECT_TRUE(got[c].equal(gray[0])) << "channel " << c;
  EXPECT_TRUE(decode_image(dir_.file("gray.png"), geometry(1, 7, 9)).equal(gray));
}

TEST_F(ImageDecodeTest, RgbToGrayIsItuR601Luma) {
  Image img = noise_image(11, 5, 3, 3);
  write_png(dir_.file("rgb.png"), img);
  at::Tensor got = decode_image(dir_.file("rgb.png"), geometry(1, 5, 11));
  ASSERT_EQ(got.sizes(), (at::IntArrayRef{1, 5, 11}));
  for (int y = 0; y < 5; ++y) {
    for (int x = 0; x < 11; ++x) {
      double luma = img.at(y, x, 0) * 299 / 1000.0 + img.at(y, x, 1) * 587 / 1000.0 + img.at(y, x, 2) * 114 / 1000.0;
      EXPECT_NEAR(got[0][y][x].item<int>(), luma, 1.0) << "at " << y << "," << x;
    }
  }
}

TEST_F(ImageDecodeTest, RgbaPngDropsAlpha) {
  Image rgba = noise_image(6, 4, 4, 4);
  write_png(dir_.file("rgba.png"), rgba);
  Image rgb = make_image(6, 4, 3, [&](int y, int x, int c) { return rgba.at(y, x, c); });
  EXPECT_TRUE(decode_image(dir_.file("rgba.png"), geometry(3, 4, 6)).equal(chw_of(rgb)));
}

TEST_F(ImageDecodeTest, SixteenBitPngKeepsTheHighByte) {
  std::vector<uint16_t> samples;
  Image want = make_image(5, 3, 1, [](int y, int x, int) { return 40 * y + 7 * x + 3; });
  for (uint8_t v : want.data) samples.push_back(static_cast<uint16_t>(v * 256 + 255 - v));
  write_png(dir_.file("gray16.png"), 5, 3, PNG_FORMAT_LINEAR_Y, samples.data());
  EXPECT_TRUE(decode_image(dir_.file("gray16.png"), geometry(1, 3, 5)).equal(chw_of(want)));
}

TEST_F(ImageDecodeTest, PalettePngIsExpanded) {
  const uint8_t colours[4][3] = {{255, 0, 0}, {0, 200, 0}, {10, 20, 30}, {90, 91, 92}};
  Image indices = make_image(4, 3, 1, [](int y, int x, int) { return (x + y) % 4; });
  write_png(dir_.file("palette.png"), 4, 3, PNG_FORMAT_RGB_COLORMAP, indices.data.data(), colours, 4);
  Image want = make_image(4, 3, 3, [&](int y, int x, int c) { return colours[(x + y) % 4][c]; });
  EXPECT_TRUE(decode_image(dir_.file("palette.png"), geometry(3, 3, 4)).equal(chw_of(want)));
}

TEST_F(ImageDecodeTest, InterlacedPngRoundTripIsExact) {
  Image img = noise_image(19, 11, 1, 5);
  write_interlaced_png(dir_.file("adam7.png"), img);
  EXPECT_TRUE(decode_image(dir_.file("adam7.png"), geometry(1, 11, 19)).equal(chw_of(img)));
}

TEST_F(ImageDecodeTest, FileExtensionDoesNotMatter) {
  Image img = noise_image(8, 8, 3, 6);
  write_png(dir_.file("really_a_png.jpg"), img);
  EXPECT_TRUE(decode_image(dir_.file("really_a_png.jpg"), geometry(3, 8, 8)).equal(chw_of(img)));
}

// ----------------------------------------------------------------- JPEG

TEST_F(ImageDecodeTest, JpegDecodesCloseToItsSource) {
  Image img = smooth_image(64, 48);
  write_jpeg(dir_.file("smooth.jpg"), img);
  at::Tensor got = decode_image(dir_.file("smooth.jpg"), geometry(3, 48, 64));
  ASSERT_EQ(got.sizes(), (at::IntArrayRef{3, 48, 64}));
  EXPECT_LT(mean_abs_error(got, chw_of(img)), 3.0);
}

TEST_F(ImageDecodeTest, ProgressiveJpegDecodesAndItsTruncationThrows) {
  Image img = smooth_image(64, 48);
  write_jpeg(dir_.file("progressive.jpg"), img, 95, true);
  at::Tensor got = decode_image(dir_.file("progressive.jpg"), geometry(3, 48, 64));
  EXPECT_LT(mean_abs_error(got, chw_of(img)), 3.0);
  // Cut after the first scans: an image of coarse detail, but not the file.
  write_first_half(dir_.file("progressive.jpg"), dir_.file("half.jpg"));
  EXPECT_EQ(decode_error(dir_.file("half.jpg"), geometry(3, 48, 64)), "truncated JPEG data");
}

TEST_F(ImageDecodeTest, GrayJpegRepeatsIntoThreeChannels) {
  Image img = make_image(32, 24, 1, [](int y, int x, int) { return 20 + 4 * x + 3 * y; });
  write_jpeg(dir_.file("gray.jpg"), img);
  at::Tensor got = decode_image(dir_.file("gray.jpg"), geometry(3, 24, 32));
  EXPECT_TRUE(got[0].equal(got[1]) && got[1].equal(got[2]));
  EXPECT_LT(mean_abs_error(got[0], chw_of(img)[0]), 2.0);
}

TEST_F(ImageDecodeTest, CmykJpegIsRefused) {
  write_jpeg(dir_.file("cmyk.jpg"), noise_image(8, 8, 4, 7));
  EXPECT_NE(decode_error(dir_.file("cmyk.jpg"), geometry(3, 8, 8)).find("CMYK"), std::string::npos);
}

// A JPEG far larger than the sample decodes at a DCT scale (1/8 here); the
// result still agrees with the same pixels resized from a lossless PNG.
TEST_F(ImageDecodeTest, LargeJpegAgreesWithThePngPath) {
  Image img = smooth_image(96, 80);
  Image big = make_image(768, 640, 3, [&](int y, int x, int c) { return img.at(y / 8, x / 8, c); });
  write_jpeg(dir_.file("big.jpg"), big);
  write_png(dir_.file("big.png"), big);
  at::Tensor from_jpeg = decode_image(dir_.file("big.jpg"), geometry(3, 64, 64, 80));
  at::Tensor from_png = decode_image(dir_.file("big.png"), geometry(3, 64, 64, 80));
  ASSERT_EQ(from_jpeg.sizes(), (at::IntArrayRef{3, 64, 64}));
  EXPECT_LT(mean_abs_error(from_jpeg, from_png), 3.0);
}

// -------------------------------------------------------- resize, crop

TEST_F(ImageDecodeTest, ResizeCoversTheSampleAndKeepsAConstantColour) {
  Image img = make_image(64, 48, 3, [](int, int, int c) { return c == 0 ? 200 : c == 1 ? 100 : 50; });
  write_png(dir_.file("flat.png"), img);
  write_jpeg(dir_.file("flat.jpg"), img);
  at::Tensor png = decode_image(dir_.file("flat.png"), geometry(3, 24, 24));
  ASSERT_EQ(png.sizes(), (at::IntArrayRef{3, 24, 24}));
  EXPECT_TRUE(png[0].eq(200).all().item<bool>() && png[1].eq(100).all().item<bool>() && png[2].eq(50).all().item<bool>());
  at::Tensor jpeg = decode_image(dir_.file("flat.jpg"), geometry(3, 24, 24));
  ASSERT_EQ(jpeg.sizes(), (at::IntArrayRef{3, 24, 24}));
  at::Tensor colour = at::tensor({200, 100, 50}, at::kInt).view({3, 1, 1});
  EXPECT_LE((jpeg.to(at::kInt) - colour).abs().max().item<int>(), 2);
}

// Shrinking averages (antialiasing): a one-pixel checkerboard shrunk 4x is
// mid-grey everywhere, not a sample of black and white pixels.
TEST_F(ImageDecodeTest, ShrinkingAveragesInsteadOfSampling) {
  Image img = make_image(64, 64, 1, [](int y, int x, int) { return (x + y) % 2 ? 255 : 0; });
  write_png(dir_.file("checker.png"), img);
  at::Tensor got = decode_image(dir_.file("checker.png"), geometry(1, 16, 16)).to(at::kInt);
  EXPECT_GE(got.min().item<int>(), 120);
  EXPECT_LE(got.max().item<int>(), 135);
}

// resize: the shorter side becomes `resize`, the longer one keeps the aspect
// ratio (int(resize * long / short)), then the centre crop.
TEST_F(ImageDecodeTest, ResizeSetsTheShorterSide) {
  // 40 wide, 20 high: left half 0, right half 200.
  Image img = make_image(40, 20, 1, [](int, int x, int) { return x < 20 ? 0 : 200; });
  write_png(dir_.file("halves.png"), img);
  at::Tensor got = decode_image(dir_.file("halves.png"), geometry(1, 10, 20, 10));
  ASSERT_EQ(got.sizes(), (at::IntArrayRef{1, 10, 20}));  // resized to 20x10 exactly: no crop
  EXPECT_TRUE(got[0].narrow(1, 0, 9).eq(0).all().item<bool>());
  EXPECT_TRUE(got[0].narrow(1, 11, 9).eq(200).all().item<bool>());
  // Taller than wide: 20 wide, 40 high to resize 10 -> 10 wide, 20 high,
  // cropped to its middle 10 rows (5..14).
  Image tall = make_image(20, 40, 1, [](int y, int, int) { return y < 20 ? 0 : 200; });
  write_png(dir_.file("tall.png"), tall);
  at::Tensor middle = decode_image(dir_.file("tall.png"), geometry(1, 10, 10, 10));
  ASSERT_EQ(middle.sizes(), (at::IntArrayRef{1, 10, 10}));
  EXPECT_TRUE(middle[0][0].eq(0).all().item<bool>());
  EXPECT_TRUE(middle[0][9].eq(200).all().item<bool>());
}

// Each column's value is its index: which columns survive the centre crop
// (offset round((w - width) / 2.0), half to even as Python's round).
TEST_F(ImageDecodeTest, CentreCropKeepsTheMiddleColumns) {
  struct Case {
    int width;
    int crop;
    int first;
  };
  for (Case c : {Case{10, 6, 2}, Case{9, 6, 2}, Case{8, 5, 2}, Case{7, 6, 0}, Case{11, 6, 2}, Case{6, 6, 0}}) {
    Image img = make_image(c.width, 4, 1, [](int, int x, int) { return 10 * x; });
    std::string path = dir_.file("columns" + std::to_string(c.width) + ".png");
    write_png(path, img);
    at::Tensor got = decode_image(path, geometry(1, 4, c.crop));
    ASSERT_EQ(got.sizes(), (at::IntArrayRef{1, 4, c.crop}));
    for (int x = 0; x < c.crop; ++x) {
      EXPECT_EQ(got[0][2][x].item<int>(), 10 * (c.first + x)) << c.width << " -> " << c.crop << " column " << x;
    }
  }
}

// A crop larger than the resized image pads it with zeros, as CenterCrop.
TEST_F(ImageDecodeTest, CropLargerThanTheImagePadsWithZeros) {
  Image img = make_image(4, 4, 1, [](int, int, int) { return 77; });
  write_png(dir_.file("small.png"), img);
  // resize 4 keeps 4x4; a 4 x 8 crop pads 2 columns on each side.
  at::Tensor got = decode_image(dir_.file("small.png"), geometry(1, 4, 8, 4));
  ASSERT_EQ(got.sizes(), (at::IntArrayRef{1, 4, 8}));
  EXPECT_TRUE(got[0].narrow(1, 0, 2).eq(0).all().item<bool>());
  EXPECT_TRUE(got[0].narrow(1, 2, 4).eq(77).all().item<bool>());
  EXPECT_TRUE(got[0].narrow(1, 6, 2).eq(0).all().item<bool>());
}

// ---------------------------------------------------------------- errors

TEST_F(ImageDecodeTest, TruncatedJpegThrows) {
  write_jpeg(dir_.file("whole.jpg"), noise_image(64, 64, 3, 8));
  write_first_half(dir_.file("whole.jpg"), dir_.file("half.jpg"));
  EXPECT_NO_THROW(decode_image(dir_.file("whole.jpg"), geometry(3, 64, 64)));
  EXPECT_EQ(decode_error(dir_.file("half.jpg"), geometry(3, 64, 64)), "truncated JPEG data");
  // Cut inside the header, and after the first two bytes.
  std::string bytes = read_bytes(dir_.file("whole.jpg"));
  testing::write_file(dir_.file("head.jpg"), bytes.substr(0, 40));
  EXPECT_EQ(decode_error(dir_.file("head.jpg"), geometry(3, 64, 64)), "truncated JPEG data");
  testing::write_file(dir_.file("soi.jpg"), bytes.substr(0, 2));
  EXPECT_EQ(decode_error(dir_.file("soi.jpg"), geometry(3, 64, 64)), "truncated JPEG data");
}

TEST_F(ImageDecodeTest, TruncatedPngThrows) {
  write_png(dir_.file("whole.png"), noise_image(64, 64, 3, 9));
  write_first_half(dir_.file("whole.png"), dir_.file("half.png"));
  EXPECT_NE(decode_error(dir_.file("half.png"), geometry(3, 64, 64)).find("truncated PNG data"), std::string::npos);
  // Every byte of the image but the last (the end of the IEND chunk).
  std::string bytes = read_bytes(dir_.file("whole.png"));
  testing::write_file(dir_.file("no_end.png"), bytes.substr(0, bytes.size() - 1));
  EXPECT_NE(decode_error(dir_.file("no_end.png"), geometry(3, 64, 64)).find("truncated PNG data"), std::string::npos);
}

TEST_F(ImageDecodeTest, CorruptPngDataThrows) {
  write_png(dir_.file("whole.png"), noise_image(32, 32, 3, 10));
  std::string bytes = read_bytes(dir_.file("whole.png"));
  for (size_t i = bytes.size() / 2; i < bytes.size() / 2 + 16; ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
  testing::write_file(dir_.file("corrupt.png"), bytes);
  EXPECT_NE(decode_error(dir_.file("corrupt.png"), geometry(3, 32, 32)).find("corrupt PNG data"), std::string::npos);
}

TEST_F(ImageDecodeTest, OtherFilesThrow) {
  testing::write_file(dir_.file("notes.jpg"), "GIF89a is not what this is\n");
  EXPECT_EQ(decode_error(dir_.file("notes.jpg"), geometry(3, 8, 8)), "not a JPEG or PNG file (starts with 47 49 46 38)");
  testing::write_file(dir_.file("empty.png"), "");
  EXPECT_EQ(decode_error(dir_.file("empty.png"), geometry(3, 8, 8)), "empty file");
  std::string missing = decode_error(dir_.file("missing.png"), geometry(3, 8, 8));
  EXPECT_NE(missing.find("cannot open"), std::string::npos) << missing;
  EXPECT_NE(missing.find("No such file"), std::string::npos) << missing;
  EXPECT_EQ(missing.find("missing.png"), std::string::npos) << "the reason without the path: " << missing;
  std::string directory = decode_error(dir_.path(), geometry(3, 8, 8));
  EXPECT_NE(directory.find("cannot"), std::string::npos) << directory;
}

TEST_F(ImageDecodeTest, BadGeometryIsAnInvalidArgument) {
  write_png(dir_.file("ok.png"), noise_image(4, 4, 3, 11));
  EXPECT_THROW(decode_image(dir_.file("ok.png"), geometry(2, 4, 4)), std::invalid_argument);
  EXPECT_THROW(decode_image(dir_.file("ok.png"), geometry(3, 0, 4)), std::invalid_argument);
  EXPECT_THROW(decode_image(dir_.file("ok.png"), geometry(3, 4, 4, -1)), std::invalid_argument);
}

// Loader threads decode at once: the same results as one after another.
TEST_F(ImageDecodeTest, DecodesFromFourThreadsAtOnce) {
  std::vector<std::string> files;
  for (int i = 0; i < 50; ++i) {
    Image img = noise_image(40 + i % 7, 30 + i % 5, i % 3 == 0 ? 1 : 3, 100 + static_cast<uint32_t>(i));
    files.push_back(dir_.file("img" + std::to_string(i) + (i % 2 ? ".jpg" : ".png")));
    if (i % 2) write_jpeg(files.back(), img); else write_png(files.back(), img);
  }
  files.push_back(dir_.file("missing.png"));
  const ImageGeometry g = geometry(3, 20, 24, 26);
  auto decode_all = [&](std::vector<at::Tensor>& out, std::vector<std::string>& errors) {
    for (const std::string& f : files) {
      try {
        out.push_back(decode_image(f, g));
      } catch (const ImageError& e) {
        errors.push_back(e.what());
      }
    }
  };
  std::vector<at::Tensor> serial;
  std::vector<std::string> serial_errors;
  decode_all(serial, serial_errors);
  ASSERT_EQ(serial.size(), 50u);
  ASSERT_EQ(serial_errors.size(), 1u);

  std::vector<std::vector<at::Tensor>> results(4);
  std::vector<std::vector<std::string>> errors(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 4; ++t) threads.emplace_back([&, t] { decode_all(results[t], errors[t]); });
  for (std::thread& t : threads) t.join();
  for (size_t t = 0; t < 4; ++t) {
    ASSERT_EQ(results[t].size(), serial.size()) << "thread " << t;
    EXPECT_EQ(errors[t], serial_errors) << "thread " << t;
    for (size_t i = 0; i < serial.size(); ++i) EXPECT_TRUE(results[t][i].equal(serial[i])) << "thread " << t << " file " << i;
  }
}

// ---------------------------------------------------------- augmentation

at::Tensor float_image(int64_t c, int64_t h, int64_t w) {
  return at::arange(c * h * w, at::kFloat).view({c, h, w}) / static_cast<double>(c * h * w);
}

TEST(ImageDecodeAugment, SameSeedSameResult) {
  at::Tensor img = float_image(3, 8, 10);
  for (uint64_t seed : {0ull, 1ull, 12345ull, ~0ull}) {
    EXPECT_TRUE(augment_image(img, seed, true, 4).equal(augment_image(img, seed, true, 4))) << seed;
  }
}

TEST(ImageDecodeAugment, DifferentSeedsGiveDifferentCrops) {
  at::Tensor img = float_image(3, 8, 10);
  at::Tensor first = augment_image(img, 0, false, 4);
  bool differs = false;
  for (uint64_t seed = 1; seed < 20 && !differs; ++seed) differs = !augment_image(img, seed, false, 4).equal(first);
  EXPECT_TRUE(differs);
}

TEST(ImageDecodeAugment, NoPaddingNoFlipIsTheIdentity) {
  at::Tensor img = float_image(3, 6, 7);
  for (uint64_t seed = 0; seed < 10; ++seed) {
    at::Tensor out = augment_image(img, seed, false, 0);
    EXPECT_TRUE(out.equal(img));
    EXPECT_NE(out.data_ptr(), img.data_ptr()) << "a new tensor";
    EXPECT_TRUE(augment_image(img, seed, false, -1).equal(img));
  }
}

TEST(ImageDecodeAugment, FlipGivesTheImageOrItsMirror) {
  at::Tensor img = float_image(3, 6, 7);
  at::Tensor mirror = img.flip({2});
  int same = 0, mirrored = 0;
  for (uint64_t seed = 0; seed < 64; ++seed) {
    at::Tensor out = augment_image(img, augment_seed(7, 0, static_cast<int64_t>(seed)), true, -1);
    if (out.equal(img)) ++same;
    else if (out.equal(mirror)) ++mirrored;
    else ADD_FAILURE() << "seed " << seed << ": neither the image nor its mirror";
  }
  EXPECT_GT(same, 10);
  EXPECT_GT(mirrored, 10);
}

TEST(ImageDecodeAugment, PaddingFillsWithZeros) {
  at::Tensor ones = at::ones({3, 8, 8}, at::kFloat);
  int with_zeros = 0;
  for (int64_t i = 0; i < 50; ++i) {
    at::Tensor out = augment_image(ones, augment_seed(1, 2, i), true, 4);
    ASSERT_EQ(out.sizes(), ones.sizes());
    // Only zeros (padding) and ones (image).
    EXPECT_TRUE((out.eq(0) | out.eq(1)).all().item<bool>());
    if (out.eq(0).any().item<bool>()) ++with_zeros;
  }
  EXPECT_GT(with_zeros, 25);
}

// The crop is a shift of the image: every pixel of the output is the input
// pixel (y + dy, x + dx) for one (dy, dx) in [-padding, padding], or zero.
TEST(ImageDecodeAugment, CropIsAShiftOfTheImage) {
  at::Tensor img = float_image(2, 9, 11) + 1;  // no zeros of its own
  const int64_t pad = 3;
  at::Tensor padded = at::constant_pad_nd(img, {pad, pad, pad, pad}, 0);
  for (int64_t i = 0; i < 30; ++i) {
    at::Tensor out = augment_image(img, augment_seed(5, 0, i), false, pad);
    bool found = false;
    for (int64_t top = 0; top <= 2 * pad && !found; ++top) {
      for (int64_t left = 0; left <= 2 * pad && !found; ++left) {
        found = out.equal(padded.narrow(1, top, 9).narrow(2, left, 11));
      }
    }
    EXPECT_TRUE(found) << "sample " << i;
  }
}

TEST(ImageDecodeAugment, SeedsDifferAcrossEpochsAndIndices) {
  std::set<uint64_t> seen;
  for (int64_t epoch = 0; epoch < 20; ++epoch) {
    for (int64_t index = 0; index < 200; ++index) seen.insert(augment_seed(42, epoch, index));
  }
  EXPECT_EQ(seen.size(), 20u * 200u);
  EXPECT_NE(augment_seed(1, 0, 0), augment_seed(2, 0, 0));
  EXPECT_NE(augment_seed(1, 1, 0), augment_seed(1, 0, 1));
  EXPECT_EQ(augment_seed(1, 3, 4), augment_seed(1, 3, 4));
}

// ------------------------------------------------------------------ image_folder

// ROOT/CLASS/NAME with a constant image of `value` (gray, 8 x 8) in each.
class ImageFolderTest : public ::testing::Test {
 protected:
  std::string root() const { return dir_.file("root"); }
  std::string add(const std::string& cls, const std::string& name, int value, bool jpeg = false) {
    std::filesystem::create_directories(root() + "/" + cls);
    const std::string path = root() + "/" + cls + "/" + name;
    Image img = make_image(8, 8, 1, [&](int, int x, int) { return x < 4 ? value : value / 2; });
    if (jpeg) write_jpeg(path, img);
    else write_png(path, img);
    return path;
  }
  DataSource source(std::vector<int64_t> shape = {1, 8, 8}) const {
    DataSource s;
    s.format = DataFormat::kImageFolder;
    s.path = root();
    s.input_shape = std::move(shape);
    return s;
  }
  std::string load_error(const DataSource& s, const std::vector<int64_t>& batch) const {
    try {
      load_dataset(s, TargetKind::kClassIndex)->get_batch(batch);
    } catch (const DataError& e) {
      return e.what();
    }
    return "no error";
  }
  TempDir dir_;
};

TEST_F(ImageFolderTest, ClassesAreSortedDirectoriesAndFilesSortedWithinEach) {
  add("zebra", "b.png", 10);
  add("ant", "2.PNG", 20);
  add("ant", "1.jpg", 30, true);
  add("ant/sub", "0.png", 40);  // a subdirectory belongs to its class, after the class's own files
  add("mole", "x.jpeg", 50, true);
  write_file(root() + "/mole/notes.txt", "not an image");
  std::filesystem::create_directories(root() + "/.hidden");
  write_file(root() + "/.hidden/x.png", "");
  const ImageFolderListing listing = list_image_folder(root(), true);
  EXPECT_EQ(listing.classes, (std::vector<std::string>{"ant", "mole", "zebra"}));
  std::vector<std::string> names;
  for (const auto& f : listing.files) names.push_back(f.substr(root().size() + 1));
  EXPECT_EQ(names, (std::vector<std::string>{"ant/1.jpg", "ant/2.PNG", "ant/sub/0.png", "mole/x.jpeg", "zebra/b.png"}));
  EXPECT_EQ(listing.labels, (std::vector<int64_t>{0, 0, 0, 1, 2}));
  EXPECT_EQ(listing.other_files, 1);
  auto data = load_dataset(source(), TargetKind::kClassIndex);
  ASSERT_EQ(data->size(), 5);
  EXPECT_EQ(data->num_classes(), 3);
  Batch b = data->get_batch({4, 1});
  EXPECT_EQ(b.input.sizes(), (std::vector<int64_t>{2, 1, 8, 8}));
  EXPECT_EQ(b.input.scalar_type(), at::kFloat);
  EXPECT_FLOAT_EQ(b.input[0][0][0][0].item<float>(), 10.0f / 255.0f);  // ToTensor's scaling
  EXPECT_FLOAT_EQ(b.input[1][0][0][0].item<float>(), 20.0f / 255.0f);
  EXPECT_EQ(b.target[0].item<int64_t>(), 2);
  EXPECT_EQ(b.target[1].item<int64_t>(), 0);
  EXPECT_NE(data->describe().find("5 images in 3 classes (1 other files ignored)"), std::string::npos)
      << data->describe();
}

TEST_F(ImageFolderTest, LoadSamplesKeepsPixelsAndFinishAugmentsPerEpochAndNormalizes) {
  for (int i = 0; i < 6; ++i) add("c" + std::to_string(i % 2), std::to_string(i) + ".png", 40 * i + 20);
  DataSource s = source();
  s.mean_std = {{0.5}, {0.25}};
  s.random_flip = true;
  s.crop_padding = 2;
  LoadOptions train;
  train.augment = true;
  train.augment_seed = 7;
  auto data = load_dataset(s, TargetKind::kClassIndex, train);
  const std::vector<int64_t> all{0, 1, 2, 3, 4, 5};
  Batch raw = data->load_samples(all);
  EXPECT_EQ(raw.input.scalar_type(), at::kByte);  // what a cache holds
  Batch plain = data->get_batch(all);             // epoch -1: no augmentation
  EXPECT_TRUE(at::allclose(plain.input, (raw.input.to(at::kFloat) / 255.0 - 0.5) / 0.25));
  Batch e1 = data->get_training_batch(all, 1), again = data->get_training_batch(all, 1);
  Batch e2 = data->get_training_batch(all, 2);
  EXPECT_TRUE(at::equal(e1.input, again.input)) << "the same epoch draws the same augmentations";
  EXPECT_FALSE(at::equal(e1.input, e2.input)) << "another epoch draws others";
  EXPECT_FALSE(at::equal(e1.input, plain.input));
  EXPECT_TRUE(at::equal(e1.target, plain.target));
  // The same sample in another batch, at another place, is augmented alike.
  Batch alone = data->get_training_batch({3}, 1);
  EXPECT_TRUE(at::equal(alone.input[0], e1.input[3]));
  // An eval set (no augment option) ignores random_flip and random_crop.
  auto eval = load_dataset(s, TargetKind::kClassIndex, LoadOptions{});
  EXPECT_TRUE(at::equal(eval->get_training_batch(all, 1).input, plain.input));
}

TEST_F(ImageFolderTest, ACorruptJpegAndATruncatedPngStopTheBatchNamingTheFile) {
  add("a", "good.png", 100);
  const std::string jpeg = add("a", "bad.jpg", 100, true);
  const std::string png = add("b", "cut.png", 100);
  std::string bytes = read_bytes(jpeg);
  for (size_t i = bytes.size() / 3; i < bytes.size() - 2; i += 7) bytes[i] = static_cast<char>(0xff);
  write_file(jpeg, bytes);
  write_first_half(png, png);
  const std::string first = load_error(source(), {0});  // a/bad.jpg sorts first
  EXPECT_NE(first.find(jpeg + ": cannot read the image:"), std::string::npos) << first;
  EXPECT_NE(first.find("skip_unreadable"), std::string::npos) << first;
  const std::string cut = load_error(source(), {2});
  EXPECT_NE(cut.find(png + ": cannot read the image:"), std::string::npos) << cut;
  EXPECT_NE(cut.find("truncated PNG data"), std::string::npos) << cut;
  EXPECT_EQ(load_error(source(), {1}), "no error");
}

TEST_F(ImageFolderTest, SkipUnreadableReplacesAFileByTheNextReadableOneAndCountsIt) {
  const std::string bad = add("a", "0.png", 10);
  add("a", "1.png", 60);
  add("b", "2.png", 90);
  write_file(bad, "not a png at all");
  DataSource s = source();
  s.skip_unreadable = true;
  auto data = load_dataset(s, TargetKind::kClassIndex);
  ::testing::internal::CaptureStderr();
  Batch b = data->get_batch({0, 0, 2});
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(b.input.size(0), 3);
  EXPECT_FLOAT_EQ(b.input[0][0][0][0].item<float>(), 60.0f / 255.0f);  // a/1.png in its place
  EXPECT_EQ(b.target[0].item<int64_t>(), 0);
  EXPECT_EQ(data->skipped_samples(), 2);
  // Said once for the file, though skipped twice.
  size_t times = 0;
  for (size_t at = said.find(bad); at != std::string::npos; at = said.find(bad, at + 1)) ++times;
  EXPECT_EQ(times, 1u) << said;
}

TEST_F(ImageFolderTest, AnEmptyClassOrNoClassIsAnErrorNamingThePath) {
  std::filesystem::create_directories(root());
  EXPECT_NE(load_error(source(), {0}).find(root() + ": no class directory"), std::string::npos);
  add("a", "0.png", 1);
  std::filesystem::create_directories(root() + "/empty");
  EXPECT_NE(load_error(source(), {0}).find(root() + "/empty: an empty class directory"), std::string::npos);
  EXPECT_NE(load_error(source({2, 8, 8}), {0}).find("C 1 or 3"), std::string::npos);
}

// An eval folder holding some of the training classes: each class keeps
// the training data's label for its name (given as LoadOptions::class_names,
// as load_eval_set does), not its place among the folder's own classes; a
// class the training data lacks is an error naming its directory.
TEST_F(ImageFolderTest, GivenTheTrainingClassesAFolderIsLabelledByClassName) {
  add("mole", "m.png", 1);
  add("zebra", "z.png", 2);
  LoadOptions options;
  options.class_names = {"ant", "mole", "zebra"};
  auto data = load_dataset(source(), TargetKind::kClassIndex, options);
  EXPECT_EQ(data->num_classes(), 3);
  at::Tensor labels = data->get_batch({0, 1}).target;
  EXPECT_EQ(labels[0].item<int64_t>(), 1);
  EXPECT_EQ(labels[1].item<int64_t>(), 2);
  EXPECT_NE(data->describe().find("2 images in 2 classes of the training data's 3"), std::string::npos)
      << data->describe();
  EXPECT_EQ(load_dataset(source(), TargetKind::kClassIndex)->get_batch({1}).target[0].item<int64_t>(), 1)
      << "without the training classes, its own";
  add("cat", "c.png", 3);
  try {
    load_dataset(source(), TargetKind::kClassIndex, options);
    ADD_FAILURE() << "a class the training data lacks was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(root() + "/cat: a class the training data does not have (ant, mole, zebra)"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ImageFolderTest, TheLoadBalancingComplexityIsTheFileSize) {
  const std::string a = add("a", "0.png", 1);
  const std::string b = add("b", "1.jpg", 1, true);
  LoadOptions options;
  options.complexity_field = "file_size";
  auto data = load_dataset(source(), TargetKind::kClassIndex, options);
  ASSERT_EQ(data->complexities().size(), 2u);
  EXPECT_EQ(data->complexities()[0], static_cast<double>(std::filesystem::file_size(a)));
  EXPECT_EQ(data->complexities()[1], static_cast<double>(std::filesystem::file_size(b)));
  options.complexity_field = "pixels";
  EXPECT_THROW(load_dataset(source(), TargetKind::kClassIndex, options), DataError);
}

}  // namespace
}  // namespace bagua::image_decode_test
