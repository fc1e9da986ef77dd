// JPEG (libjpeg-turbo) and PNG (libpng) decoding for image_folder data
// sources, the centre crop, and the training augmentation.
//
// Error handling. Both libraries report a fatal error through a callback
// that must not return, and bagua longjmps out of it. A longjmp must never
// skip a live C++ object with a destructor, so every call into either
// library happens inside one of the `*_guarded` functions below: each calls
// setjmp, then a plain step function (named by a function pointer), and
// neither holds anything but pointers and integers. The state the steps
// need (the library's structs, the message, the output rows) lives in a
// job object owned by the C++ caller, whose destructor releases the
// library's memory after a failure as after a success. A guarded call
// returns false when the library jumped, and the caller then throws
// ImageError with the recorded message.
//
// libjpeg's warnings (emit_message at level -1: "Premature end of JPEG
// file", "Corrupt JPEG data: ...") are errors too: the callback records the
// message and jumps like error_exit, so a truncated file never decodes into
// grey. libpng's warnings are about ancillary chunks (colour profiles,
// text) and are ignored; a truncated or corrupt image stream is a libpng
// error, and so is a file that ends before its IEND chunk.
//
// Resizing is bagua's own separable triangle filter ("bilinear" in PIL's
// and torchvision's sense): each output pixel is the normalised weighted
// sum of the input pixels within max(1, scale) input pixels of its centre
// (pixel centres at i + 0.5, weights 1 - distance / support), first along
// rows, then along columns, in float, rounded once at the end. Enlarging,
// that is plain bilinear interpolation with edge clamping
// (align_corners=False); shrinking, the support widens with the scale,
// which is the antialiasing of PIL's resize and of LibTorch's
// _upsample_bilinear2d_aa (1.13 has it, but it would run in LibTorch's
// intra-op thread pool from every loader thread at once, on float copies).
// Only the rows and columns of the centre crop are computed.
#include "data/image_decode.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <limits>
#include <system_error>
#include <vector>

#include <jpeglib.h>
#include <jerror.h>  // after jpeglib.h: the message codes (JWRN_JPEG_EOF)
#include <png.h>

namespace bagua::data {
namespace image_decode_detail {

// Larger images (as decoded: a JPEG after its DCT scaling) are refused
// before any pixel buffer is allocated (a corrupt header can claim
// 65500 x 65500).
constexpr int64_t kMaxPixels = int64_t{1} << 28;

// ------------------------------------------------------------------ files

// Closes a FILE* when the reading is over (or throws).
struct FileCloser {
  FILE* file;
  ~FileCloser() { std::fclose(file); }
};

std::string errno_text(int error) { return std::system_category().message(error); }

std::vector<unsigned char> read_whole_file(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) throw ImageError("cannot open: " + errno_text(errno));
  FileCloser closer{file};
  std::vector<unsigned char> bytes;
  unsigned char chunk[1 << 16];
  for (;;) {
    size_t got = std::fread(chunk, 1, sizeof(chunk), file);
    bytes.insert(bytes.end(), chunk, chunk + got);
    if (got < sizeof(chunk)) break;
  }
  if (std::ferror(file)) throw ImageError("cannot read: " + errno_text(errno));
  return bytes;
}

// ----------------------------------------------------------------- pixels

// Decoded pixels, interleaved (HWC), 1 or 3 channels; source_height and
// source_width are the size the file declares (a JPEG decoded at a DCT
// scale is smaller).
struct Pixels {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;
  int64_t source_height = 0;
  int64_t source_width = 0;
  std::vector<unsigned char> data;
};

struct Size2 {
  int64_t height;
  int64_t width;
};

// The size an image of h x w is resized to before the centre crop.
Size2 resized_size(int64_t h, int64_t w, const ImageGeometry& g) {
  if (g.resize > 0) {
    // torchvision's Resize(int): the shorter side becomes `resize`, the
    // longer one int(resize * long / short).
    if (w <= h) return {g.resize * h / w, g.resize};
    return {g.resize, g.resize * w / h};
  }
  // Just covering height x width: the side with the larger scale factor
  // takes its size exactly, the other is scaled by the same factor.
  if (g.height * w >= g.width * h) {
    int64_t scaled = std::llround(static_cast<double>(w) * static_cast<double>(g.height) / static_cast<double>(h));
    return {g.height, std::max(g.width, scaled)};
  }
  int64_t scaled = std::llround(static_cast<double>(h) * static_cast<double>(g.width) / static_cast<double>(w));
  return {std::max(g.height, scaled), g.width};
}

// Where torchvision's CenterCrop of `crop` pixels starts in an image of
// `size` pixels: int(round((size - crop) / 2.0)), Python's round taking a
// half to the even neighbour; when the crop is larger, the image is first
// padded by (crop - size) // 2 zeros before it, so the crop starts that far
// before the image.
int64_t centre_offset(int64_t size, int64_t crop) {
  int64_t spare = size - crop;
  if (spare < 0) return -((-spare) / 2);
  int64_t half = spare / 2;
  if (spare % 2 == 1 && half % 2 == 1) ++half;
  return half;
}

uint8_t luma(const unsigned char* rgb) {
  return static_cast<uint8_t>((rgb[0] * 299 + rgb[1] * 587 + rgb[2] * 114 + 500) / 1000);
}

// Gray to 3 channels by repetition, RGB to gray by ITU-R 601-2 luma.
void convert_channels(Pixels& px, int64_t channels) {
  if (px.channels == channels) return;
  const int64_t n = px.height * px.width;
  std::vector<unsigned char> out(static_cast<size_t>(n * channels));
  if (channels == 3) {
    for (int64_t i = 0; i < n; ++i) out[3 * i] = out[3 * i + 1] = out[3 * i + 2] = px.data[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = luma(&px.data[3 * i]);
  }
  px.data = std::move(out);
  px.channels = channels;
}

// The input pixels each output pixel of one axis reads, and their weights.
struct Taps {
  int64_t stride = 0;                // weights per output pixel (zero-padded)
  std::vector<int64_t> first;        // first input pixel of each output pixel
  std::vector<float> weights;        // stride per output pixel, summing to 1
};

Taps triangle_taps(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double support = std::max(scale, 1.0);
  Taps taps;
  taps.stride = static_cast<int64_t>(std::ceil(support)) * 2 + 2;
  taps.first.resize(static_cast<size_t>(out));
  taps.weights.assign(static_cast<size_t>(out * taps.stride), 0.0f);
  std::vector<double> w(static_cast<size_t>(taps.stride));
  for (int64_t i = 0; i < out; ++i) {
    const double centre = (static_cast<double>(i) + 0.5) * scale;
    int64_t lo = std::max<int64_t>(0, static_cast<int64_t>(std::floor(centre - support - 0.5)));
    int64_t hi = std::min<int64_t>(in - 1, static_cast<int64_t>(std::ceil(centre - 0.5 + support)));
    hi = std::min(hi, lo + taps.stride - 1);
    double total = 0;
    for (int64_t j = lo; j <= hi; ++j) {
      double d = std::fabs(static_cast<double>(j) + 0.5 - centre) / support;
      w[static_cast<size_t>(j - lo)] = d < 1 ? 1 - d : 0;
      total += w[static_cast<size_t>(j - lo)];
    }
    if (total <= 0) {  // cannot happen (the nearest pixel weighs > 0), but never divide by 0
      int64_t nearest = std::clamp<int64_t>(static_cast<int64_t>(centre), 0, in - 1);
      lo = hi = nearest;
      w[0] = total = 1;
    }
    taps.first[static_cast<size_t>(i)] = lo;
    for (int64_t j = lo; j <= hi; ++j) {
      taps.weights[static_cast<size_t>(i * taps.stride + (j - lo))] = static_cast<float>(w[static_cast<size_t>(j - lo)] / total);
    }
  }
  return taps;
}

// [C, H, W] uint8: `px` resized to `to` and centre-cropped to g.height x
// g.width, zeros where the crop reaches past the resized image.
at::Tensor resize_and_crop(const Pixels& px, Size2 to, const ImageGeometry& g) {
  const int64_t C = px.channels, H = g.height, W = g.width;
  at::Tensor result = at::zeros({C, H, W}, at::kByte);
  uint8_t* dst = result.data_ptr<uint8_t>();
  const int64_t top = centre_offset(to.height, H);
  const int64_t left = centre_offset(to.width, W);
  // The crop's rows and columns inside the resized image.
  const int64_t y0 = std::max<int64_t>(0, -top), y1 = std::min(H, to.height - top);
  const int64_t x0 = std::max<int64_t>(0, -left), x1 = std::min(W, to.width - left);
  if (y1 <= y0 || x1 <= x0) return result;
  const unsigned char* src = px.data.data();

  if (to.height == px.height && to.width == px.width) {
    for (int64_t y = y0; y < y1; ++y) {
      for (int64_t x = x0; x < x1; ++x) {
        const unsigned char* p = src + ((y + top) * px.width + (x + left)) * C;
        for (int64_t c = 0; c < C; ++c) dst[(c * H + y) * W + x] = p[c];
      }
    }
    return result;
  }

  // Along rows: every input row, the crop's columns only.
  const Taps across = triangle_taps(px.width, to.width);
  const int64_t cols = x1 - x0;
  std::vector<float> rows(static_cast<size_t>(px.height * cols * C));
  for (int64_t r = 0; r < px.height; ++r) {
    const unsigned char* line = src + r * px.width * C;
    for (int64_t x = x0; x < x1; ++x) {
      const int64_t o = x + left;
      const float* w = &across.weights[static_cast<size_t>(o * across.stride)];
      const unsigned char* p = line + across.first[static_cast<size_t>(o)] * C;
      const int64_t n = std::min(across.stride, px.width - across.first[static_cast<size_t>(o)]);
      float* out = &rows[static_cast<size_t>((r * cols + (x - x0)) * C)];
      for (int64_t c = 0; c < C; ++c) {
        float sum = 0;
        for (int64_t k = 0; k < n; ++k) sum += w[k] * static_cast<float>(p[k * C + c]);
        out[c] = sum;
      }
    }
  }
  // Along columns: the crop's rows only.
  const Taps down = triangle_taps(px.height, to.height);
  for (int64_t y = y0; y < y1; ++y) {
    const int64_t o = y + top;
    const float* w = &down.weights[static_cast<size_t>(o * down.stride)];
    const int64_t first = down.first[static_cast<size_t>(o)];
    const int64_t n = std::min(down.stride, px.height - first);
    for (int64_t x = 0; x < cols; ++x) {
      for (int64_t c = 0; c < C; ++c) {
        float sum = 0;
        for (int64_t k = 0; k < n; ++k) sum += w[k] * rows[static_cast<size_t>(((first + k) * cols + x) * C + c)];
        float v = std::clamp(sum, 0.0f, 255.0f);
        dst[(c * H + y) * W + (x + x0)] = static_cast<uint8_t>(v + 0.5f);
      }
    }
  }
  return result;
}

// ------------------------------------------------------------------- JPEG

// libjpeg's error manager, with where to jump and what went wrong.
// Standard layout, the manager first: libjpeg hands the callbacks a
// pointer to the manager, which is a pointer to this.
struct JpegErrors {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
};

struct JpegJob {
  jpeg_decompress_struct cinfo;
  JpegErrors errors;
  bool created = false;
  const unsigned char* data = nullptr;
  size_t size = 0;
  unsigned scale_num = 8;
  unsigned char* out = nullptr;  // the output rows, output_width * output_components bytes each
  size_t row_bytes = 0;

  JpegJob() {
    std::memset(&cinfo, 0, sizeof(cinfo));
    std::memset(&errors, 0, sizeof(errors));
  }
  ~JpegJob() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
  JpegJob(const JpegJob&) = delete;
  JpegJob& operator=(const JpegJob&) = delete;
};

void jpeg_fail(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// Level -1 is a warning (corrupt or truncated data, which libjpeg would
// paper over): an error here. Levels >= 0 are trace messages.
void jpeg_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  reinterpret_cast<JpegErrors*>(cinfo->err)->truncated = cinfo->err->msg_code == JWRN_JPEG_EOF;
  jpeg_fail(cinfo);
}

void jpeg_step_header(JpegJob* job) {
  jpeg_create_decompress(&job->cinfo);
  job->created = true;
  jpeg_mem_src(&job->cinfo, job->data, static_cast<unsigned long>(job->size));
  jpeg_read_header(&job->cinfo, TRUE);
}

void jpeg_step_scale(JpegJob* job) {
  job->cinfo.scale_num = job->scale_num;
  job->cinfo.scale_denom = 8;
  jpeg_calc_output_dimensions(&job->cinfo);
}

void jpeg_step_start(JpegJob* job) { jpeg_start_decompress(&job->cinfo); }

void jpeg_step_rows(JpegJob* job) {
  while (job->cinfo.output_scanline < job->cinfo.output_height) {
    JSAMPROW row = job->out + static_cast<size_t>(job->cinfo.output_scanline) * job->row_bytes;
    jpeg_read_scanlines(&job->cinfo, &row, 1);
  }
  jpeg_finish_decompress(&job->cinfo);
}

// Runs one step; false when libjpeg jumped out of it. No C++ object lives
// in this frame (or in the step's), so the jump skips no destructor.
bool jpeg_guarded(JpegJob* job, void (*step)(JpegJob*)) {
  if (setjmp(job->errors.jump)) return false;
  step(job);
  return true;
}

void jpeg_run(JpegJob& job, void (*step)(JpegJob*)) {
  if (jpeg_guarded(&job, step)) return;
  if (job.errors.truncated) throw ImageError("truncated JPEG data");
  throw ImageError(std::string("corrupt JPEG data: ") + job.errors.message);
}

Pixels decode_jpeg(const std::vector<unsigned char>& bytes, const ImageGeometry& g) {
  JpegJob job;
  job.cinfo.err = jpeg_std_error(&job.errors.mgr);
  job.errors.mgr.error_exit = jpeg_fail;
  job.errors.mgr.emit_message = jpeg_message;
  job.data = bytes.data();
  job.size = bytes.size();
  jpeg_run(job, jpeg_step_header);

  jpeg_decompress_struct& cinfo = job.cinfo;
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    throw ImageError("CMYK JPEG images are not supported");
  }
  const bool gray = cinfo.num_components == 1;
  cinfo.out_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
  Pixels px;
  px.source_height = cinfo.image_height;
  px.source_width = cinfo.image_width;
  if (px.source_height <= 0 || px.source_width <= 0) throw ImageError("JPEG image of no pixels");
  // The smallest DCT scale M/8 whose output still covers the resized size.
  const Size2 target = resized_size(px.source_height, px.source_width, g);
  for (unsigned num = 1; num <= 8; ++num) {
    job.scale_num = num;
    jpeg_run(job, jpeg_step_scale);
    if (num == 8 || (static_cast<int64_t>(cinfo.output_width) >= target.width &&
                     static_cast<int64_t>(cinfo.output_height) >= target.height)) {
      break;
    }
  }
  jpeg_run(job, jpeg_step_start);
  px.height = cinfo.output_height;
  px.width = cinfo.output_width;
  px.channels = cinfo.output_components;
  if (px.height * px.width > kMaxPixels) {
    throw ImageError("JPEG image of " + std::to_string(px.width) + "x" + std::to_string(px.height) +
                     " pixels is too large");
  }
  if (px.channels != (gray ? 1 : 3)) {
    throw ImageError("JPEG decodes to " + std::to_string(px.channels) + " channels");
  }
  job.row_bytes = static_cast<size_t>(px.width * px.channels);
  px.data.resize(job.row_bytes * static_cast<size_t>(px.height));
  job.out = px.data.data();
  jpeg_run(job, jpeg_step_rows);
  return px;
}

// -------------------------------------------------------------------- PNG

struct PngJob {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const unsigned char* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  png_bytepp rows = nullptr;
  char message[256] = {};

  ~PngJob() {
    if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  }
  PngJob() = default;
  PngJob(const PngJob&) = delete;
  PngJob& operator=(const PngJob&) = delete;
};

void png_fail(png_structp png, png_const_charp message) {
  auto* job = static_cast<PngJob*>(png_get_error_ptr(png));
  std::snprintf(job->message, sizeof(job->message), "%s", message);
  png_longjmp(png, 1);
}

void png_ignore_warning(png_structp, png_const_charp) {}

void png_read_memory(png_structp png, png_bytep out, size_t length) {
  auto* job = static_cast<PngJob*>(png_get_io_ptr(png));
  if (length > job->size - job->pos) png_error(png, "truncated PNG data");
  std::memcpy(out, job->data + job->pos, length);
  job->pos += length;
}

// Reads the header and sets the transformations: 8 bits a sample, palette
// expanded, alpha dropped, gray or RGB left as they are.
void png_step_header(PngJob* job) {
  png_structp png = job->png;
  png_set_read_fn(png, job, png_read_memory);
  png_read_info(png, job->info);
  const int depth = png_get_bit_depth(png, job->info);
  const int colour = png_get_color_type(png, job->info);
  if (depth == 16) png_set_strip_16(png);
  if (colour == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (colour == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (colour & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, job->info);
}

void png_step_rows(PngJob* job) {
  png_read_image(job->png, job->rows);
  png_read_end(job->png, nullptr);
}

// As jpeg_guarded: no C++ object lives in this frame or the step's.
bool png_guarded(PngJob* job, void (*step)(PngJob*)) {
  if (setjmp(png_jmpbuf(job->png))) return false;
  step(job);
  return true;
}

void png_run(PngJob& job, void (*step)(PngJob*)) {
  if (!png_guarded(&job, step)) {
    const std::string why = job.message;
    // Our own reader's words say it already; libpng's get a prefix.
    throw ImageError(why.rfind("truncated", 0) == 0 ? why : "corrupt PNG data: " + why);
  }
}

Pixels decode_png(const std::vector<unsigned char>& bytes) {
  PngJob job;
  job.data = bytes.data();
  job.size = bytes.size();
  job.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, png_fail, png_ignore_warning);
  if (job.png) job.info = png_create_info_struct(job.png);
  if (!job.png || !job.info) throw ImageError("cannot start libpng (out of memory)");
  png_run(job, png_step_header);

  Pixels px;
  px.height = px.source_height = png_get_image_height(job.png, job.info);
  px.width = px.source_width = png_get_image_width(job.png, job.info);
  px.channels = png_get_channels(job.png, job.info);
  if (px.height <= 0 || px.width <= 0 || px.height * px.width > kMaxPixels) {
    throw ImageError("PNG image of " + std::to_string(px.width) + "x" + std::to_string(px.height) +
                     " pixels is too large");
  }
  const size_t row_bytes = png_get_rowbytes(job.png, job.info);
  if ((px.channels != 1 && px.channels != 3) || row_bytes != static_cast<size_t>(px.width * px.channels)) {
    throw ImageError("PNG decodes to " + std::to_string(px.channels) + " channels");
  }
  px.data.resize(row_bytes * static_cast<size_t>(px.height));
  std::vector<png_bytep> rows(static_cast<size_t>(px.height));
  for (size_t r = 0; r < rows.size(); ++r) rows[r] = px.data.data() + r * row_bytes;
  job.rows = rows.data();
  png_run(job, png_step_rows);
  return px;
}

// ------------------------------------------------------------------ format

constexpr unsigned char kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr unsigned char kJpegStart[3] = {0xff, 0xd8, 0xff};

bool starts_with(const std::vector<unsigned char>& bytes, const unsigned char* magic, size_t n) {
  return bytes.size() >= n && std::memcmp(bytes.data(), magic, n) == 0;
}

// A file shorter than the magic it begins: the start of one cut short.
bool prefix_of(const std::vector<unsigned char>& bytes, const unsigned char* magic, size_t n) {
  return bytes.size() < n && std::memcmp(bytes.data(), magic, bytes.size()) == 0;
}

std::string first_bytes(const std::vector<unsigned char>& bytes) {
  std::string out;
  char hex[4];
  for (size_t i = 0; i < std::min<size_t>(4, bytes.size()); ++i) {
    std::snprintf(hex, sizeof(hex), i ? " %02x" : "%02x", bytes[i]);
    out += hex;
  }
  return out;
}

void check_geometry(const ImageGeometry& g) {
  if ((g.channels != 1 && g.channels != 3) || g.height <= 0 || g.width <= 0 || g.resize < 0) {
    throw std::invalid_argument("decode_image: bad geometry: channels " + std::to_string(g.channels) + " (1 or 3), " +
                                std::to_string(g.height) + "x" + std::to_string(g.width) + ", resize " +
                                std::to_string(g.resize));
  }
}

// ------------------------------------------------------------ augmentation

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// splitmix64: the state advances by the golden ratio, each output is its mix.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() { return mix64(state += kGolden); }
  // 0 .. n-1 (n small: the modulo's bias is below 2^-60).
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }
};

}  // namespace image_decode_detail

at::Tensor decode_image(const std::string& path, const ImageGeometry& geometry) {
  using namespace image_decode_detail;
  check_geometry(geometry);
  const std::vector<unsigned char> bytes = read_whole_file(path);
  Pixels px;
  if (starts_with(bytes, kJpegStart, sizeof(kJpegStart))) {
    px = decode_jpeg(bytes, geometry);
  } else if (starts_with(bytes, kPngSignature, sizeof(kPngSignature))) {
    px = decode_png(bytes);
  } else if (bytes.empty()) {
    throw ImageError("empty file");
  } else if (prefix_of(bytes, kJpegStart, sizeof(kJpegStart))) {
    throw ImageError("truncated JPEG data");
  } else if (prefix_of(bytes, kPngSignature, sizeof(kPngSignature))) {
    throw ImageError("truncated PNG data");
  } else {
    throw ImageError("not a JPEG or PNG file (starts with " + first_bytes(bytes) + ")");
  }
  convert_channels(px, geometry.channels);
  return resize_and_crop(px, resized_size(px.source_height, px.source_width, geometry), geometry);
}

at::Tensor augment_image(const at::Tensor& chw, uint64_t seed, bool flip, int64_t crop_padding) {
  using namespace image_decode_detail;
  if (chw.dim() != 3) {
    throw std::invalid_argument("augment_image: expected an image [C, H, W], got " + std::to_string(chw.dim()) +
                                " dimensions");
  }
  SplitMix64 random{seed};
  at::Tensor out;
  if (crop_padding >= 0) {
    // RandomCrop(size, padding): the crop's corner in the padded image is
    // uniform in [0, 2 * padding] on each axis (rows drawn first), i.e. at
    // (dy, dx) = corner - padding in the image.
    const int64_t H = chw.size(1), W = chw.size(2);
    const int64_t dy = random.below(2 * crop_padding + 1) - crop_padding;
    const int64_t dx = random.below(2 * crop_padding + 1) - crop_padding;
    out = at::zeros_like(chw, at::MemoryFormat::Contiguous);
    const int64_t y0 = std::max<int64_t>(0, -dy), y1 = std::min(H, H - dy);
    const int64_t x0 = std::max<int64_t>(0, -dx), x1 = std::min(W, W - dx);
    if (y1 > y0 && x1 > x0) {
      out.narrow(1, y0, y1 - y0).narrow(2, x0, x1 - x0).copy_(chw.narrow(1, y0 + dy, y1 - y0).narrow(2, x0 + dx, x1 - x0));
    }
  } else {
    out = chw.clone(at::MemoryFormat::Contiguous);
  }
  if (flip && (random.next() >> 63) != 0) out = out.flip({2});
  return out;
}

uint64_t augment_seed(uint64_t seed, int64_t epoch, int64_t index) {
  using image_decode_detail::kGolden;
  using image_decode_detail::mix64;
  uint64_t h = mix64(seed + kGolden);
  h = mix64(h ^ mix64(static_cast<uint64_t>(epoch) + 2 * kGolden));
  h = mix64(h ^ mix64(static_cast<uint64_t>(index) + 3 * kGolden));
  return h;
}

}  // namespace bagua::data
