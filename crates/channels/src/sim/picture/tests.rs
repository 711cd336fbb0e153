//! Decoding the fixtures under `test_data/images` (one 48x32 picture of four coloured quarters,
//! saved in each format and flavour), PNG flavours made here, EXIF orientation, hostile bytes,
//! and scaling.

use std::path::Path;

use super::*;

/// The fixtures' quarters: top left, top right, bottom left, bottom right.
const QUARTERS: [[u8; 3]; 4] = [[220, 40, 40], [40, 200, 60], [40, 60, 220], [230, 220, 60]];

fn fixtures() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("test_data/images");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect()
}

fn close(a: [u8; 3], b: [u8; 3], tolerance: u8) -> bool {
    a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= tolerance)
}

/// Checks the colour at the middle of each quarter of `pic`.
fn check_quarters(name: &str, pic: &Picture, expected: [[u8; 3]; 4], tolerance: u8) {
    let (w, h) = (pic.width(), pic.height());
    for (i, want) in expected.into_iter().enumerate() {
        let x = if i % 2 == 0 { w / 4 } else { w * 3 / 4 };
        let y = if i < 2 { h / 4 } else { h * 3 / 4 };
        let got = pic.pixel(x, y).unwrap();
        assert!(
            close(got, want, tolerance),
            "{name}: quarter {i} at {x},{y}: got {got:?}, want {want:?}"
        );
    }
}

fn luma601([r, g, b]: [u8; 3]) -> u8 {
    (0.299 * f64::from(r) + 0.587 * f64::from(g) + 0.114 * f64::from(b)).round() as u8
}

#[test]
fn decodes_every_fixture() {
    let files = fixtures();
    assert!(files.len() >= 8, "{files:?}", files = files.len());
    for (name, bytes) in &files {
        let pic = decode(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((pic.width(), pic.height()), (48, 32), "{name}");
        let expected = if name.contains("gray") {
            QUARTERS.map(|c| [luma601(c); 3])
        } else {
            QUARTERS
        };
        let tolerance = if name.ends_with(".png") || name.contains("lossless") {
            0
        } else {
            16
        };
        check_quarters(name, &pic, expected, tolerance);
        // `read` takes the same bytes from a reader.
        assert_eq!(read(bytes.as_slice()).unwrap(), pic, "{name}");
    }
}

/// Encodes a PNG with the png crate.
fn encode_png(
    width: u32,
    height: u32,
    color: png::ColorType,
    depth: png::BitDepth,
    palette: Option<Vec<u8>>,
    data: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(color);
    encoder.set_depth(depth);
    if let Some(p) = palette {
        encoder.set_palette(p);
    }
    let mut writer = encoder.write_header().unwrap();
    writer.write_image_data(data).unwrap();
    writer.finish().unwrap();
    out
}

#[test]
fn decodes_png_flavours_to_rgb_over_black() {
    use png::{BitDepth, ColorType};
    // Name, file, the two pixels it holds.
    type Case = (&'static str, Vec<u8>, [[u8; 3]; 2]);
    let cases: [Case; 5] = [
        (
            "gray",
            encode_png(2, 1, ColorType::Grayscale, BitDepth::Eight, None, &[0, 200]),
            [[0, 0, 0], [200, 200, 200]],
        ),
        (
            "gray + alpha",
            encode_png(
                2,
                1,
                ColorType::GrayscaleAlpha,
                BitDepth::Eight,
                None,
                &[200, 255, 200, 0],
            ),
            [[200, 200, 200], [0, 0, 0]],
        ),
        (
            "palette, 4 bits",
            encode_png(
                2,
                1,
                ColorType::Indexed,
                BitDepth::Four,
                Some(vec![10, 20, 30, 40, 50, 60]),
                &[0x10],
            ),
            [[40, 50, 60], [10, 20, 30]],
        ),
        (
            "rgba",
            encode_png(
                2,
                1,
                ColorType::Rgba,
                BitDepth::Eight,
                None,
                &[200, 100, 50, 128, 1, 2, 3, 255],
            ),
            [[100, 50, 25], [1, 2, 3]],
        ),
        (
            "rgb, 16 bits",
            encode_png(
                2,
                1,
                ColorType::Rgb,
                BitDepth::Sixteen,
                None,
                &[0xAB, 0xCD, 0x12, 0x34, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0],
            ),
            [[0xAB, 0x12, 0xFF], [0, 0, 0]],
        ),
    ];
    for (name, bytes, want) in cases {
        let pic = decode(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((pic.width(), pic.height()), (2, 1), "{name}");
        assert_eq!(pic.pixel(0, 0), Some(want[0]), "{name}");
        assert_eq!(pic.pixel(1, 0), Some(want[1]), "{name}");
    }
}

/// A little-endian TIFF header with IFD0 holding one orientation entry.
fn exif(orientation: u16, big_endian: bool) -> Vec<u8> {
    let mut t = Vec::new();
    if big_endian {
        t.extend_from_slice(b"MM\0*");
        t.extend_from_slice(&8u32.to_be_bytes());
        t.extend_from_slice(&1u16.to_be_bytes());
        t.extend_from_slice(&0x0112u16.to_be_bytes());
        t.extend_from_slice(&3u16.to_be_bytes());
        t.extend_from_slice(&1u32.to_be_bytes());
        t.extend_from_slice(&orientation.to_be_bytes());
        t.extend_from_slice(&[0, 0]);
        t.extend_from_slice(&0u32.to_be_bytes());
    } else {
        t.extend_from_slice(b"II*\0");
        t.extend_from_slice(&8u32.to_le_bytes());
        t.extend_from_slice(&1u16.to_le_bytes());
        t.extend_from_slice(&0x0112u16.to_le_bytes());
        t.extend_from_slice(&3u16.to_le_bytes());
        t.extend_from_slice(&1u32.to_le_bytes());
        t.extend_from_slice(&orientation.to_le_bytes());
        t.extend_from_slice(&[0, 0]);
        t.extend_from_slice(&0u32.to_le_bytes());
    }
    t
}

#[test]
fn reads_the_exif_orientation() {
    assert_eq!(exif_orientation(&exif(6, false)), Some(6));
    assert_eq!(exif_orientation(&exif(8, true)), Some(8));
    let mut prefixed = b"Exif\0\0".to_vec();
    prefixed.extend(exif(3, true));
    assert_eq!(exif_orientation(&prefixed), Some(3));
    assert_eq!(exif_orientation(&exif(9, false)), None);
    assert_eq!(exif_orientation(&exif(0, false)), None);
    assert_eq!(exif_orientation(b""), None);
    assert_eq!(exif_orientation(b"II*\0\xff\xff\xff\xff"), None);
    let whole = exif(6, false);
    for cut in 0..whole.len() {
        let _ = exif_orientation(&whole[..cut]);
    }
}

#[test]
fn applies_each_orientation() {
    // 3x2, pixel value = its index: 0 1 2 / 3 4 5.
    let pic = Picture::from_rgb(3, 2, (0..6).flat_map(|i| [i, i, i]).collect()).unwrap();
    // Width, height, the pixels' values.
    type Grid = (u32, u32, Vec<u8>);
    let grid = |p: &Picture| -> Grid {
        (
            p.width(),
            p.height(),
            p.rgb().iter().step_by(3).copied().collect(),
        )
    };
    let cases: [(u16, Grid); 9] = [
        (0, (3, 2, vec![0, 1, 2, 3, 4, 5])),
        (1, (3, 2, vec![0, 1, 2, 3, 4, 5])),
        (2, (3, 2, vec![2, 1, 0, 5, 4, 3])),
        (3, (3, 2, vec![5, 4, 3, 2, 1, 0])),
        (4, (3, 2, vec![3, 4, 5, 0, 1, 2])),
        (5, (2, 3, vec![0, 3, 1, 4, 2, 5])),
        (6, (2, 3, vec![3, 0, 4, 1, 5, 2])),
        (7, (2, 3, vec![5, 2, 4, 1, 3, 0])),
        (8, (2, 3, vec![2, 5, 1, 4, 0, 3])),
    ];
    for (orientation, want) in cases {
        assert_eq!(
            grid(&pic.clone().oriented(orientation)),
            want,
            "{orientation}"
        );
    }
}

#[test]
fn a_jpeg_tagged_rotate_90_comes_out_upright() {
    let (_, jpeg) = fixtures()
        .into_iter()
        .find(|(n, _)| n == "quad.jpg")
        .unwrap();
    // An APP1 segment right after SOI.
    let mut app1 = b"Exif\0\0".to_vec();
    app1.extend(exif(6, false));
    let mut tagged = jpeg[..2].to_vec();
    tagged.extend_from_slice(&[0xFF, 0xE1]);
    tagged.extend_from_slice(&(app1.len() as u16 + 2).to_be_bytes());
    tagged.extend(app1);
    tagged.extend_from_slice(&jpeg[2..]);
    let pic = decode(&tagged).unwrap();
    assert_eq!((pic.width(), pic.height()), (32, 48));
    // Turned a quarter clockwise: the top-left quarter is now top right, and so on.
    let [tl, tr, bl, br] = QUARTERS;
    check_quarters("rotated", &pic, [bl, tl, br, tr], 16);
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn png_chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    let start = out.len();
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let crc = crc32(&out[start..]);
    out.extend_from_slice(&crc.to_be_bytes());
}

/// A PNG whose header declares `width` x `height` RGB, with almost no image data.
fn png_claiming(width: u32, height: u32) -> Vec<u8> {
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    png_chunk(&mut out, b"IHDR", &ihdr);
    png_chunk(
        &mut out,
        b"IDAT",
        &[0x78, 0x9C, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    png_chunk(&mut out, b"IEND", &[]);
    out
}

fn fixture(name: &str) -> Vec<u8> {
    fixtures()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no fixture {name}"))
        .1
}

#[test]
fn refuses_huge_declared_sizes_before_allocating() {
    let too_large = |bytes: &[u8]| matches!(decode(bytes), Err(PictureError::InvalidSize { .. }));

    assert!(too_large(&png_claiming(8192, 8192)), "over the pixel limit");
    assert!(too_large(&png_claiming(8193, 16)), "over the side limit");
    assert!(decode(&png_claiming(100_000, 100_000)).is_err());
    assert!(decode(&png_claiming(0x7FFF_FFFF, 0x7FFF_FFFF)).is_err());
    // The same small header decodes far enough to fail on the missing pixels only.
    assert!(matches!(
        decode(&png_claiming(4, 4)),
        Err(PictureError::Png(_))
    ));

    // JPEG: height and width in the start-of-frame segment.
    for (name, sof) in [("quad.jpg", 0xC0), ("quad-progressive.jpg", 0xC2)] {
        let jpeg = fixture(name);
        let at = jpeg
            .windows(2)
            .position(|w| w == [0xFF, sof])
            .unwrap_or_else(|| panic!("{name}: no SOF"));
        for (w, h) in [(60_000u16, 60_000u16), (8000, 8000), (9000, 10)] {
            let mut bad = jpeg.clone();
            bad[at + 5..at + 7].copy_from_slice(&h.to_be_bytes());
            bad[at + 7..at + 9].copy_from_slice(&w.to_be_bytes());
            assert!(too_large(&bad), "{name} {w}x{h}: {:?}", decode(&bad));
        }
    }

    // WebP lossless: 14-bit sides minus one after the 0x2f signature.
    let mut webp = fixture("quad-lossless.webp");
    assert_eq!(&webp[12..16], b"VP8L");
    let header = u32::from_le_bytes(webp[21..25].try_into().unwrap());
    let huge = (header & 0xF000_0000) | 16383 | (16383 << 14);
    webp[21..25].copy_from_slice(&huge.to_le_bytes());
    assert!(too_large(&webp), "{:?}", decode(&webp));

    // WebP lossy: 14-bit sides after the key frame start code.
    let mut webp = fixture("quad-lossy.webp");
    assert_eq!(&webp[12..16], b"VP8 ");
    assert_eq!(webp[23..26], [0x9d, 0x01, 0x2a]);
    webp[26..28].copy_from_slice(&0x3FFFu16.to_le_bytes());
    webp[28..30].copy_from_slice(&0x3FFFu16.to_le_bytes());
    assert!(too_large(&webp), "{:?}", decode(&webp));
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    for bytes in [
        &b""[..],
        b"hello, world",
        b"\x89PNG\r\n\x1a\n",
        b"\xFF\xD8\xFF",
        b"\xFF\xD8\xFF\xE0\x00\x10JFIF\0",
        b"RIFF\0\0\0\0WEBP",
        b"RIFF\xff\xff\xff\xffWEBPVP8X\x0a\0\0\0\x10\0\0\0\xff\xff\xff\xff\xff\xff",
        b"GIF89a\x01\0\x01\0",
    ] {
        assert!(decode(bytes).is_err(), "{bytes:?}");
    }
    assert!(matches!(decode(b"BM..."), Err(PictureError::UnknownFormat)));

    // Every fixture cut short, and with each byte flipped: whatever comes out, no panic.
    for (name, bytes) in fixtures() {
        for cut in 0..bytes.len() {
            let res = decode(&bytes[..cut]);
            // (A PNG is whole without its 12-byte end chunk.)
            if cut < 40 || name.ends_with(".png") && cut < bytes.len() - 12 {
                assert!(res.is_err(), "{name} cut at {cut}");
            }
        }
        for i in 0..bytes.len() {
            for flip in [0xFF, 0x01, 0x80] {
                let mut bad = bytes.clone();
                bad[i] ^= flip;
                let _ = decode(&bad);
            }
        }
    }
}

#[test]
fn read_refuses_an_oversized_file() {
    let endless = std::io::repeat(0).take(MAX_FILE_BYTES + 1);
    assert!(matches!(read(endless), Err(PictureError::FileTooLarge)));
}

fn solid(w: u32, h: u32, c: [u8; 3]) -> Picture {
    Picture::from_rgb(w, h, c.repeat((w * h) as usize)).unwrap()
}

#[test]
fn from_rgb_checks_the_length() {
    assert!(Picture::from_rgb(2, 2, vec![0; 12]).is_some());
    assert!(Picture::from_rgb(2, 2, vec![0; 11]).is_none());
    assert!(Picture::from_rgb(0, 2, vec![]).is_none());
    assert!(Picture::from_rgb(u32::MAX, u32::MAX, vec![]).is_none());
    assert!(format!("{:?}", solid(3, 1, [1, 2, 3])).contains("width: 3"));
}

#[test]
fn cover_fills_the_frame_and_crops_about_the_centre() {
    let quad = decode(&fixture("quad.png")).unwrap();
    // Same size: untouched.
    assert_eq!(quad.cover(48, 32), quad);
    // Larger, smaller, wider and taller: the quarters stay quarters about the centre.
    for (w, h) in [(160, 90), (90, 160), (12, 8), (7, 5), (200, 40), (480, 320)] {
        let scaled = quad.cover(w, h);
        assert_eq!((scaled.width(), scaled.height()), (w as u32, h as u32));
        check_quarters(&format!("{w}x{h}"), &scaled, QUARTERS, 2);
    }

    // Three stripes side by side: a square keeps the middle one only.
    let stripes = [[255, 0, 0], [0, 255, 0], [0, 0, 255]];
    let rgb = (0..10)
        .flat_map(|_| (0..30).flat_map(|x| stripes[x / 10]))
        .collect();
    let wide = Picture::from_rgb(30, 10, rgb).unwrap();
    for side in [4, 10, 25] {
        let sq = wide.cover(side, side);
        for y in 0..side as u32 {
            for x in 1..side as u32 - 1 {
                assert_eq!(sq.pixel(x, y), Some([0, 255, 0]), "{side}: {x},{y}");
            }
        }
    }

    // Shrinking averages: a fine checkerboard becomes mid grey, not black or white.
    let rgb = (0..64)
        .flat_map(|i| [if (i % 8 + i / 8) % 2 == 0 { 0 } else { 255 }; 3])
        .collect();
    let board = Picture::from_rgb(8, 8, rgb).unwrap();
    for side in [1, 2, 3] {
        let small = board.cover(side, side);
        assert!(
            small.rgb().iter().all(|&v| v.abs_diff(128) <= 24),
            "{side}: {:?}",
            small.rgb()
        );
    }

    // A single pixel grows to anything; zero sides count as one.
    assert_eq!(solid(1, 1, [9, 8, 7]).cover(5, 3), solid(5, 3, [9, 8, 7]));
    assert_eq!(solid(4, 4, [9, 8, 7]).cover(0, 0), solid(1, 1, [9, 8, 7]));
}
