// Images of an image_folder data source (torchvision's ImageFolder layout):
// decoding a JPEG or PNG file into a sample of fixed geometry, and the
// training augmentation (random crop with padding, horizontal flip) with
// reproducible per-sample seeds.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace bagua::data {

// Where a decoded image goes: channels (1 or 3), height, width of the
// sample, and `resize`: the shorter side is scaled to this many pixels
// before the centre crop (0: the image is scaled so that it just covers
// height x width).
struct ImageGeometry {
  int64_t channels = 3;
  int64_t height = 0;
  int64_t width = 0;
  int64_t resize = 0;
};

// A file that is not a readable JPEG or PNG (corrupt, truncated, another
// format, an empty file), or that cannot be opened. what() is the reason
// without the path, e.g. "truncated JPEG data" or "not a JPEG or PNG file
// (starts with 47 49 46 38)".
class ImageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Decodes the JPEG or PNG file at `path` (recognised by its first bytes, not
// its extension) into a uint8 tensor [channels, height, width]:
//  - channels converted: gray -> 3 channels by repeating it; colour -> gray by
//    ITU-R 601-2 luma L = (R*299 + G*587 + B*114) / 1000, rounded (as PIL's
//    convert('L')); PNG alpha dropped (not composited); 16-bit PNG reduced
//    to its high byte; palette and low-bit-depth PNGs expanded. CMYK/YCCK
//    JPEGs are refused with ImageError.
//  - resized (separable bilinear, antialiased when shrinking: see
//    image_decode.cpp) so the SHORTER side equals geometry.resize (the
//    longer one floor(resize * long / short), as torchvision's Resize), or,
//    when resize == 0, so the image just covers height x width
//    (scale = max(height/h, width/w)); no resize when the size already
//    matches;
//  - centre-cropped to height x width as torchvision's CenterCrop: offset
//    round((h - height) / 2.0) with Python's round (half to even), and
//    zero padding where the resized image is smaller than the crop.
// Large JPEGs are decoded at the smallest libjpeg DCT scale (M/8) that is
// still at least the resized size.
// Throws ImageError on any decode problem (libjpeg warnings such as
// "Premature end of JPEG file" count as errors) and when the file cannot
// be opened or read; std::invalid_argument for a bad geometry. Thread-safe.
at::Tensor decode_image(const std::string& path, const ImageGeometry& geometry);

// Training augmentation of one float image [C, H, W] (values as ToTensor
// gives, 0..1), returning a new tensor of the same shape: first a random
// crop of H x W from the image padded by `crop_padding` zeros on each side
// (torchvision RandomCrop(size, padding)); crop_padding < 0 means no crop;
// then, when `flip`, a horizontal flip with probability 0.5. Every random
// draw comes from a splitmix64 generator seeded with `seed` alone, so the
// same seed gives the same result on every machine.
at::Tensor augment_image(const at::Tensor& chw, uint64_t seed, bool flip, int64_t crop_padding);

// A seed for sample `index` in `epoch` of a run seeded with `seed`
// (splitmix64 rounds absorbing the three).
uint64_t augment_seed(uint64_t seed, int64_t epoch, int64_t index);

}  // namespace bagua::data
