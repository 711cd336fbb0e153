//! The magic-byte sniffer and image dimension reader of `crates/fetch` over arbitrary bytes:
//! never a panic; only the first `SNIFF_LEN` bytes decide the format; dimensions are found only
//! for images, are never zero, and do not change when bytes are appended; and a PNG header the
//! `png` crate reads gives the same dimensions.
#![no_main]

use fetch::{Format, MediaKind, SNIFF_LEN, image_dimensions, sniff};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let format = sniff(data);
    let mut longer = data.to_vec();
    if data.len() >= SNIFF_LEN {
        longer.extend_from_slice(b"tail");
        assert_eq!(
            sniff(&longer),
            format,
            "bytes past SNIFF_LEN changed the format"
        );
    }
    if let Some(format) = format {
        assert!(format.kind().formats().contains(&format));
    }

    let dims = image_dimensions(data);
    if let Some((w, h)) = dims {
        assert!(w > 0 && h > 0);
        assert_eq!(
            format.map(Format::kind),
            Some(MediaKind::Image),
            "{format:?}"
        );
        longer.truncate(data.len());
        longer.extend_from_slice(&[0xFF; 64]);
        assert_eq!(
            image_dimensions(&longer),
            dims,
            "appended bytes changed the dimensions"
        );
    }

    if format == Some(Format::Png) {
        let decoder = png::Decoder::new(std::io::Cursor::new(data));
        if let Ok(reader) = decoder.read_info() {
            let info = reader.info();
            assert_eq!(dims, Some((info.width, info.height)), "png crate disagrees");
        }
    }
});
