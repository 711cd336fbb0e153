//! Still pictures for the simulator's first frame: PNG, JPEG and WebP decoded to 8-bit RGB, and
//! scaled to a video's size.
//!
//! The bytes come from clients, so no header is trusted: the format is sniffed from the magic
//! bytes, the declared size is checked against [`MAX_SIDE`] and [`MAX_PIXELS`] before any pixel
//! buffer is allocated, and a damaged or truncated file is an error, never a panic.
//!
//! - Transparency (PNG, WebP) is composited over black.
//! - The EXIF orientation (JPEG `APP1`, PNG `eXIf`, WebP `EXIF`) is applied, so a phone photo
//!   stored sideways comes out upright.
//! - 16-bit PNGs are cut to 8 bits; colour profiles and gamma are ignored (samples are taken as
//!   sRGB). An animated PNG or WebP gives its first frame.

use std::fmt;
use std::io::{self, Cursor, Read};

use zune_jpeg::JpegDecoder;
use zune_jpeg::zune_core::bytestream::ZCursor;
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;

/// Largest accepted width or height of a picture.
pub const MAX_SIDE: u32 = 8192;
/// Largest accepted number of pixels (48 Mi: a 48-megapixel photo still fits). Decoding such a
/// picture holds a few hundred MiB for a moment.
pub const MAX_PIXELS: u64 = 48 * 1024 * 1024;
/// Largest accepted file, for [`read`].
pub const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// The formats [`decode`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    Jpeg,
    Webp,
}

impl ImageFormat {
    /// The format the magic bytes announce, if it is one of ours.
    pub fn sniff(bytes: &[u8]) -> Option<ImageFormat> {
        if bytes.starts_with(&[0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A]) {
            Some(ImageFormat::Png)
        } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(ImageFormat::Jpeg)
        } else if bytes.get(..4) == Some(b"RIFF") && bytes.get(8..12) == Some(b"WEBP") {
            Some(ImageFormat::Webp)
        } else {
            None
        }
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            ImageFormat::Png => "png",
            ImageFormat::Jpeg => "jpeg",
            ImageFormat::Webp => "webp",
        }
    }
}

impl fmt::Display for ImageFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PictureError {
    #[error("picture: not a png, jpeg or webp image")]
    UnknownFormat,
    #[error("picture: read the file: {0}")]
    Read(#[source] io::Error),
    #[error("picture: file larger than {MAX_FILE_BYTES} bytes")]
    FileTooLarge,
    #[error(
        "picture: {format} of {width}x{height}: each side must be 1..={MAX_SIDE} and the whole \
         at most {MAX_PIXELS} pixels"
    )]
    InvalidSize {
        format: ImageFormat,
        width: u64,
        height: u64,
    },
    #[error("picture: decode the png: {0}")]
    Png(#[source] png::DecodingError),
    #[error("picture: decode the jpeg: {0}")]
    Jpeg(#[source] zune_jpeg::errors::DecodeErrors),
    #[error("picture: decode the webp: {0}")]
    Webp(#[source] image_webp::DecodingError),
    #[error("picture: {format}: {what}")]
    Unsupported {
        format: ImageFormat,
        what: &'static str,
    },
}

/// An 8-bit RGB picture, row by row, without padding.
#[derive(Clone, PartialEq, Eq)]
pub struct Picture {
    width: u32,
    height: u32,
    rgb: Vec<u8>,
}

impl fmt::Debug for Picture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Picture")
            .field("width", &self.width)
            .field("height", &self.height)
            .finish_non_exhaustive()
    }
}

impl Picture {
    /// A picture of `width * height` RGB pixels; `None` when a side is zero or `rgb` has not
    /// exactly that many pixels.
    pub fn from_rgb(width: u32, height: u32, rgb: Vec<u8>) -> Option<Picture> {
        let len = (width as usize)
            .checked_mul(height as usize)?
            .checked_mul(3)?;
        (width > 0 && height > 0 && rgb.len() == len).then_some(Picture { width, height, rgb })
    }

    pub fn width(&self) -> u32 {
        self.width
    }

    pub fn height(&self) -> u32 {
        self.height
    }

    /// The pixels, `width * height` RGB triples, row by row.
    pub fn rgb(&self) -> &[u8] {
        &self.rgb
    }

    pub fn pixel(&self, x: u32, y: u32) -> Option<[u8; 3]> {
        if x >= self.width || y >= self.height {
            return None;
        }
        let i = (y as usize * self.width as usize + x as usize) * 3;
        let px = self.rgb.get(i..i + 3)?;
        Some([px[0], px[1], px[2]])
    }

    /// This picture scaled to cover `width` x `height` and cropped to it about its centre: the
    /// whole frame is picture, and what sticks out on the long side is cut evenly from both
    /// ends (the picture is never stretched, nor letterboxed). Shrinking averages (a triangle
    /// filter as wide as the scale), enlarging interpolates bilinearly. Sides of 0 count as 1.
    pub fn cover(&self, width: usize, height: usize) -> Picture {
        let (width, height) = (width.max(1), height.max(1));
        let (sw, sh) = (self.width as usize, self.height as usize);
        let scale = f64::max(width as f64 / sw as f64, height as f64 / sh as f64);
        let (crop_w, crop_h) = (width as f64 / scale, height as f64 / scale);
        let xs = Taps::new((sw as f64 - crop_w) / 2.0, crop_w, sw, width);
        let ys = Taps::new((sh as f64 - crop_h) / 2.0, crop_h, sh, height);

        // Across first, on only the source rows the vertical taps reach.
        let (row0, row1) = ys.span();
        let mut across = vec![0u8; (row1 - row0) * width * 3];
        for (r, out) in across.chunks_exact_mut(width * 3).enumerate() {
            let start = (row0 + r) * sw * 3;
            let src = &self.rgb[start..start + sw * 3];
            for (x, px) in out.chunks_exact_mut(3).enumerate() {
                let (first, weights) = xs.get(x);
                let mut acc = [0f32; 3];
                for (k, &w) in weights.iter().enumerate() {
                    let s = (first + k) * 3;
                    acc[0] += f32::from(src[s]) * w;
                    acc[1] += f32::from(src[s + 1]) * w;
                    acc[2] += f32::from(src[s + 2]) * w;
                }
                for (dst, a) in px.iter_mut().zip(acc) {
                    *dst = to_u8(a);
                }
            }
        }

        // Then down.
        let line = width * 3;
        let mut rgb = vec![0u8; line * height];
        let mut acc = vec![0f32; line];
        for (y, out) in rgb.chunks_exact_mut(line).enumerate() {
            acc.fill(0.0);
            let (first, weights) = ys.get(y);
            for (k, &w) in weights.iter().enumerate() {
                let start = (first + k - row0) * line;
                for (a, &s) in acc.iter_mut().zip(&across[start..start + line]) {
                    *a += f32::from(s) * w;
                }
            }
            for (dst, &a) in out.iter_mut().zip(&acc) {
                *dst = to_u8(a);
            }
        }
        Picture {
            width: width as u32,
            height: height as u32,
            rgb,
        }
    }

    /// Applies an EXIF orientation (1..=8; anything else leaves the picture as it is).
    fn oriented(self, orientation: u16) -> Picture {
        if !(2..=8).contains(&orientation) {
            return self;
        }
        let (w, h) = (self.width as usize, self.height as usize);
        let (ow, oh) = if orientation >= 5 { (h, w) } else { (w, h) };
        let mut rgb = Vec::with_capacity(self.rgb.len());
        for y in 0..oh {
            for x in 0..ow {
                // Where output pixel (x, y) comes from in the stored picture.
                let (sx, sy) = match orientation {
                    2 => (w - 1 - x, y),
                    3 => (w - 1 - x, h - 1 - y),
                    4 => (x, h - 1 - y),
                    5 => (y, x),
                    6 => (y, h - 1 - x),
                    7 => (w - 1 - y, h - 1 - x),
                    _ => (w - 1 - y, x),
                };
                let i = (sy * w + sx) * 3;
                rgb.extend_from_slice(&self.rgb[i..i + 3]);
            }
        }
        Picture {
            width: ow as u32,
            height: oh as u32,
            rgb,
        }
    }
}

fn to_u8(x: f32) -> u8 {
    x.round().clamp(0.0, 255.0) as u8
}

/// For each output pixel along one axis: the first source pixel it reads and the weights of
/// the pixels from there on.
struct Taps {
    /// Weights per output pixel, zero padded.
    stride: usize,
    first: Vec<usize>,
    count: Vec<usize>,
    weights: Vec<f32>,
}

impl Taps {
    /// Output pixels `0..dst` cover source pixels `offset..offset + len` (fractional) of a line
    /// of `src` pixels; taps reaching past the crop (not past the line) are kept, so the edges
    /// are not darkened.
    fn new(offset: f64, len: f64, src: usize, dst: usize) -> Taps {
        let step = len / dst as f64;
        let support = step.max(1.0);
        let stride = (2.0 * support).ceil() as usize + 2;
        let mut taps = Taps {
            stride,
            first: Vec::with_capacity(dst),
            count: Vec::with_capacity(dst),
            weights: vec![0.0; stride * dst],
        };
        for i in 0..dst {
            let centre = offset + (i as f64 + 0.5) * step;
            let lo = ((centre - support).floor().max(0.0) as usize).min(src - 1);
            let hi = ((centre + support).ceil().max(0.0) as usize).clamp(lo + 1, src);
            let hi = hi.min(lo + stride);
            let row = &mut taps.weights[i * stride..i * stride + (hi - lo)];
            let mut sum = 0.0;
            for (k, w) in row.iter_mut().enumerate() {
                let d = ((lo + k) as f64 + 0.5 - centre).abs() / support;
                let v = (1.0 - d).max(0.0);
                *w = v as f32;
                sum += v;
            }
            if sum > 0.0 {
                for w in row.iter_mut() {
                    *w = (f64::from(*w) / sum) as f32;
                }
            } else {
                row.fill(0.0);
                row[0] = 1.0;
            }
            taps.first.push(lo);
            taps.count.push(hi - lo);
        }
        taps
    }

    fn get(&self, i: usize) -> (usize, &[f32]) {
        let start = i * self.stride;
        (self.first[i], &self.weights[start..start + self.count[i]])
    }

    /// The source range all taps together read.
    fn span(&self) -> (usize, usize) {
        let lo = self.first.iter().copied().min().unwrap_or(0);
        let hi = self
            .first
            .iter()
            .zip(&self.count)
            .map(|(f, c)| f + c)
            .max()
            .unwrap_or(lo);
        (lo, hi)
    }
}

/// Reads a whole image file (at most [`MAX_FILE_BYTES`]) and decodes it.
pub fn read(reader: impl Read) -> Result<Picture, PictureError> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(PictureError::Read)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(PictureError::FileTooLarge);
    }
    decode(&bytes)
}

/// Decodes a PNG, JPEG or WebP file, told apart by its magic bytes.
pub fn decode(bytes: &[u8]) -> Result<Picture, PictureError> {
    match ImageFormat::sniff(bytes) {
        Some(ImageFormat::Png) => decode_png(bytes),
        Some(ImageFormat::Jpeg) => decode_jpeg(bytes),
        Some(ImageFormat::Webp) => decode_webp(bytes),
        None => Err(PictureError::UnknownFormat),
    }
}

/// Refuses a declared size outside the limits; else the pixel count.
fn check_size(format: ImageFormat, width: u64, height: u64) -> Result<usize, PictureError> {
    let side = 1..=u64::from(MAX_SIDE);
    if side.contains(&width) && side.contains(&height) && width * height <= MAX_PIXELS {
        Ok((width * height) as usize)
    } else {
        Err(PictureError::InvalidSize {
            format,
            width,
            height,
        })
    }
}

fn decode_png(bytes: &[u8]) -> Result<Picture, PictureError> {
    const FORMAT: ImageFormat = ImageFormat::Png;
    let mut decoder = png::Decoder::new(Cursor::new(bytes));
    decoder.set_transformations(png::Transformations::normalize_to_color8());
    decoder.set_ignore_text_chunk(true);
    let mut reader = decoder.read_info().map_err(PictureError::Png)?;
    let (width, height) = (reader.info().width, reader.info().height);
    let pixels = check_size(FORMAT, width.into(), height.into())?;
    let orientation = reader
        .info()
        .exif_metadata
        .as_deref()
        .and_then(exif_orientation);
    let size = reader
        .output_buffer_size()
        .ok_or(PictureError::Unsupported {
            format: FORMAT,
            what: "frame too large",
        })?;
    let mut buf = vec![0; size];
    let out = reader.next_frame(&mut buf).map_err(PictureError::Png)?;
    if (out.width, out.height) != (width, height) || out.bit_depth != png::BitDepth::Eight {
        return Err(PictureError::Unsupported {
            format: FORMAT,
            what: "the first frame is not the whole image",
        });
    }
    let channels = match out.color_type {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => {
            return Err(PictureError::Unsupported {
                format: FORMAT,
                what: "palette not expanded",
            });
        }
    };
    if out.line_size != width as usize * channels {
        return Err(PictureError::Unsupported {
            format: FORMAT,
            what: "unexpected row size",
        });
    }
    let rgb = to_rgb(buf, channels, pixels).ok_or(PictureError::Unsupported {
        format: FORMAT,
        what: "short frame",
    })?;
    Ok(Picture { width, height, rgb }.oriented(orientation.unwrap_or(1)))
}

fn decode_jpeg(bytes: &[u8]) -> Result<Picture, PictureError> {
    const FORMAT: ImageFormat = ImageFormat::Jpeg;
    // zune-jpeg's own size limit is lifted to JPEG's so ours gives the error.
    let options = DecoderOptions::default()
        .jpeg_set_out_colorspace(ColorSpace::RGB)
        .set_max_width(usize::from(u16::MAX))
        .set_max_height(usize::from(u16::MAX));
    let mut decoder = JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    decoder.decode_headers().map_err(PictureError::Jpeg)?;
    let (width, height) = decoder
        .dimensions()
        .map(|(w, h)| (w as u64, h as u64))
        .ok_or(PictureError::Unsupported {
            format: FORMAT,
            what: "no frame header",
        })?;
    let pixels = check_size(FORMAT, width, height)?;
    if decoder.output_colorspace() != Some(ColorSpace::RGB) {
        return Err(PictureError::Unsupported {
            format: FORMAT,
            what: "cannot convert to rgb",
        });
    }
    let orientation = decoder.exif().and_then(|e| exif_orientation(e));
    let mut rgb = vec![0; pixels * 3];
    decoder.decode_into(&mut rgb).map_err(PictureError::Jpeg)?;
    Ok(Picture {
        width: width as u32,
        height: height as u32,
        rgb,
    }
    .oriented(orientation.unwrap_or(1)))
}

fn decode_webp(bytes: &[u8]) -> Result<Picture, PictureError> {
    const FORMAT: ImageFormat = ImageFormat::Webp;
    let mut decoder =
        image_webp::WebPDecoder::new(Cursor::new(bytes)).map_err(PictureError::Webp)?;
    let (width, height) = decoder.dimensions();
    let pixels = check_size(FORMAT, width.into(), height.into())?;
    // Metadata is a nicety: a broken EXIF chunk does not spoil the picture.
    let orientation = decoder
        .exif_metadata()
        .ok()
        .flatten()
        .and_then(|e| exif_orientation(&e));
    let channels = if decoder.has_alpha() { 4 } else { 3 };
    let mut buf = vec![0; pixels * channels];
    decoder.read_image(&mut buf).map_err(PictureError::Webp)?;
    let rgb = to_rgb(buf, channels, pixels).ok_or(PictureError::Unsupported {
        format: FORMAT,
        what: "short frame",
    })?;
    Ok(Picture { width, height, rgb }.oriented(orientation.unwrap_or(1)))
}

/// Gray, gray + alpha, RGB or RGBA samples to RGB, alpha composited over black. `None` when
/// `buf` holds fewer than `pixels` pixels.
fn to_rgb(mut buf: Vec<u8>, channels: usize, pixels: usize) -> Option<Vec<u8>> {
    if buf.len() < pixels.checked_mul(channels)? {
        return None;
    }
    let over_black = |c: u8, a: u8| ((u16::from(c) * u16::from(a) + 127) / 255) as u8;
    match channels {
        1 => Some(buf[..pixels].iter().flat_map(|&g| [g, g, g]).collect()),
        2 => Some(
            buf[..pixels * 2]
                .chunks_exact(2)
                .flat_map(|p| {
                    let g = over_black(p[0], p[1]);
                    [g, g, g]
                })
                .collect(),
        ),
        3 => {
            buf.truncate(pixels * 3);
            Some(buf)
        }
        4 => {
            // In place: pixel i moves from 4i to 3i, never past a pixel still to be read.
            for i in 0..pixels {
                let a = buf[4 * i + 3];
                for c in 0..3 {
                    buf[3 * i + c] = over_black(buf[4 * i + c], a);
                }
            }
            buf.truncate(pixels * 3);
            Some(buf)
        }
        _ => None,
    }
}

/// The orientation tag (0x0112) of IFD0 in EXIF data (a TIFF header, optionally after
/// `Exif\0\0`), when it holds 1..=8.
fn exif_orientation(exif: &[u8]) -> Option<u16> {
    let tiff = exif.strip_prefix(b"Exif\0\0").unwrap_or(exif);
    let big_endian = match tiff.get(..4)? {
        b"MM\0*" => true,
        b"II*\0" => false,
        _ => return None,
    };
    let u16_at = |at: usize| {
        let b = tiff.get(at..at.checked_add(2)?)?;
        let b = [b[0], b[1]];
        Some(if big_endian {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        })
    };
    let u32_at = |at: usize| {
        let b = tiff.get(at..at.checked_add(4)?)?;
        let b = [b[0], b[1], b[2], b[3]];
        Some(if big_endian {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    };
    let ifd = usize::try_from(u32_at(4)?).ok()?;
    let entries = u16_at(ifd)?;
    for i in 0..usize::from(entries) {
        let entry = ifd.checked_add(2 + 12 * i)?;
        if u16_at(entry)? != 0x0112 {
            continue;
        }
        // Type SHORT, one value, held in the first two bytes of the value field.
        if u16_at(entry + 2)? != 3 {
            return None;
        }
        let value = u16_at(entry + 8)?;
        return (1..=8).contains(&value).then_some(value);
    }
    None
}

#[cfg(test)]
mod tests;
